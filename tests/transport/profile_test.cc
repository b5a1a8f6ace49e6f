// Provider profiles (fabflow/profile.h): the loader refuses every malformed file naming the
// file and the field; the built-in profiles load; the profile transport reports the envelope
// and fails each call outside it by its rule (one test per rule: drop a rule and its test
// fails), while calls inside it work end to end on local, shm and tcp.
#include <gtest/gtest.h>

#include <fabflow/fault.h>
#include <fabflow/local.h>
#include <fabflow/profile.h>
#include <fabflow/status.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/ranks.h"

namespace fabflow {
namespace {

using nlohmann::json;

// A strict envelope for the rule tests: FI_MR_LOCAL, 4-byte CQ data, 32-byte injects, 4 KiB
// messages, no atomics, four transmit and four receive entries, RDM only.
json strict() {
  auto cap = [](json v) { return json{{"value", std::move(v)}, {"source", "test"}}; };
  return {{"name", "strict"},
          {"provider", "test"},
          {"summary", "a strict envelope for tests"},
          {"capabilities",
           {{"endpoint_types", cap({"rdm"})},
            {"mr_mode", cap({"local", "virt_addr", "prov_key"})},
            {"cq_data_size", cap(4)},
            {"inject_size", cap(32)},
            {"max_msg_size", cap(4096)},
            {"tx_depth", cap(4)},
            {"rx_depth", cap(4)},
            {"rma_iov_limit", cap(1)},
            {"ops", cap({"send", "write", "read", "writedata"})},
            {"atomics", cap(json::array())},
            {"msg_order", cap({"sas"})},
            {"data_order", cap(false)},
            {"rma_event", cap(false)},
            {"shared_rx", cap(false)},
            {"multi_recv", cap(false)},
            {"modes", cap(json::array())},
            {"uses_fi_more", cap(false)},
            {"data_progress", cap("manual")},
            {"control_progress", cap("manual")}}}};
}

ProviderProfile strict_profile() { return parse_profile(strict().dump(), "strict.json"); }

// The message of the UsageError that parsing `doc` throws ("" when it parses).
std::string parse_error(const json& doc) {
  try {
    parse_profile(doc.dump(), "bad.json");
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

TEST(ProfileParse, StrictTestProfileParses) {
  const ProviderProfile p = strict_profile();
  EXPECT_EQ(p.cq_data_size, 4u);
  EXPECT_TRUE(p.requires_mr("local"));
  EXPECT_TRUE(p.has(Op::writedata));
  EXPECT_FALSE(p.has(Op::fadd));
  EXPECT_EQ(p.entries.size(), 19u);
}

TEST(ProfileParse, MalformedFilesNameTheFileAndTheField) {
  EXPECT_NE(parse_error(json::array()).find("bad.json"), std::string::npos);
  try {
    parse_profile("{not json", "broken.json");
    ADD_FAILURE() << "malformed JSON parsed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: not valid JSON"), std::string::npos);
  }
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown top field", [](json& d) { d["colour"] = "red"; }, "colour: unknown field"},
      {"unknown capability",
       [](json& d) {
         d["capabilities"]["warp"] = {{"value", 1}, {"source", "x"}};
       },
       "capabilities.warp: unknown capability"},
      {"missing capability", [](json& d) { d["capabilities"].erase("inject_size"); },
       "capabilities.inject_size: missing"},
      {"missing source", [](json& d) { d["capabilities"]["inject_size"].erase("source"); },
       "capabilities.inject_size: needs a non-empty string \"source\""},
      {"null value", [](json& d) { d["capabilities"]["inject_size"]["value"] = nullptr; },
       "capabilities.inject_size: has no value"},
      {"negative size", [](json& d) { d["capabilities"]["inject_size"]["value"] = -1; },
       "capabilities.inject_size: must be a non-negative integer"},
      {"wide cq data", [](json& d) { d["capabilities"]["cq_data_size"]["value"] = 16; },
       "capabilities.cq_data_size: must be at most 8"},
      {"unknown mr bit", [](json& d) { d["capabilities"]["mr_mode"]["value"] = {"lokal"}; },
       "capabilities.mr_mode: unknown value 'lokal'"},
      {"duplicate op",
       [](json& d) {
         d["capabilities"]["ops"]["value"] = {"send", "send"};
       },
       "capabilities.ops: 'send' given twice"},
      {"bad progress", [](json& d) { d["capabilities"]["data_progress"]["value"] = "fast"; },
       "capabilities.data_progress: must be \"auto\" or \"manual\""},
      {"bad flag", [](json& d) { d["capabilities"]["data_order"]["value"] = "yes"; },
       "capabilities.data_order: must be true or false"},
      {"no endpoint", [](json& d) { d["capabilities"]["endpoint_types"]["value"] = json::array(); },
       "capabilities.endpoint_types: names no endpoint type"},
      {"extra key", [](json& d) { d["capabilities"]["inject_size"]["maybe"] = 1; },
       "capabilities.inject_size.maybe: unknown key"},
      {"writedata without cq data", [](json& d) { d["capabilities"]["cq_data_size"]["value"] = 0; },
       "capabilities.ops: writedata needs cq_data_size"},
  };
  for (const auto& c : cases) {
    json d = strict();
    c.edit(d);
    const std::string err = parse_error(d);
    EXPECT_NE(err.find("profile bad.json: "), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": " << err;
  }
}

TEST(ProfileParse, BuiltInProfilesLoadAndUnknownNamesListThem) {
  const auto names = builtin_profile_names();
  for (const char* want : {"verbs", "efa", "cxi"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    const ProviderProfile p = load_profile(n);
    EXPECT_EQ(p.name, n);
    EXPECT_EQ(p.origin, "built-in");
    for (const auto& e : p.entries) EXPECT_FALSE(e.source.empty()) << n << " " << e.field;
  }
  try {
    load_profile("infiniband");
    ADD_FAILURE() << "an unknown profile loaded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown profile 'infiniband' (known: "),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("efa"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile("/nonexistent/profile.json"), UsageError);
}

TEST(ProfileParse, AFileLoadsByPath) {
  const std::string path = ::testing::TempDir() + "fabflow_profile_test.json";
  std::ofstream(path) << strict().dump(2);
  EXPECT_EQ(load_profile(path).name, "strict");
  EXPECT_EQ(load_profile(path).origin, path);
}

TEST(ProfileCaps, TheEnvelopeIsTheIntersection) {
  const Capabilities local = local_capabilities();
  const Capabilities held = apply_profile(local, strict_profile());
  EXPECT_EQ(held.cq_data_size, 4u);
  EXPECT_EQ(held.inject_size, std::min<std::size_t>(local.inject_size, 32));
  EXPECT_EQ(held.max_msg_size, 4096u);
  EXPECT_FALSE(held.atomics_u64);
  EXPECT_FALSE(held.in_order_data);
  EXPECT_FALSE(held.peer_mapping);
  EXPECT_FALSE(held.cross_memory_attach);
  EXPECT_EQ(held.rx_in_place_max, 0u);
  EXPECT_NE(held.mr_mode, 0u);
  EXPECT_TRUE(held.supports(Op::writedata));
}

TEST(ProfileCaps, RefusesWhatTheProfileLacks) {
  const ProviderProfile p = strict_profile();
  Capabilities caps = local_capabilities();
  caps.endpoint = EndpointType::rdm;
  const std::array<Op, 1> fadd{Op::fadd};
  EXPECT_NE(profile_refusal(caps, p, fadd).find("profile strict (test) has no u64 fadd atomic"),
            std::string::npos)
      << profile_refusal(caps, p, fadd);
  caps.endpoint = EndpointType::msg;
  const std::array<Op, 1> send{Op::send};
  EXPECT_NE(profile_refusal(caps, p, send).find("has no msg endpoints (it has: rdm)"),
            std::string::npos);
  caps.endpoint = EndpointType::rdm;
  EXPECT_EQ(profile_refusal(caps, p, send), "");
  TransportOptions o;
  o.provider = "local";
  o.ops = {Op::fadd};
  const std::string path = ::testing::TempDir() + "fabflow_profile_refuse.json";
  std::ofstream(path) << strict().dump();
  o.profile = path;
  EXPECT_THROW(probe_transport(o), UsageError);
  EXPECT_THROW(open_transport(o), UsageError);
}

// ---- the rules, one by one: a call outside the envelope fails before it reaches the inner
// transport (no peer needed), and its counter says which rule refused it.

struct Held {
  std::unique_ptr<Transport> t;
  std::unique_ptr<MemoryRegion> mr;
  RemoteMemory remote;  // a made-up remote region (never reached: the rules refuse first)
};

Held held_local() {
  TransportOptions o;
  o.provider = "local";
  o.ops = {Op::send, Op::write, Op::read, Op::writedata};
  Held h;
  h.t = make_profile_transport(open_transport(o), strict_profile(), o.ops);
  h.mr = h.t->allocate(8192, kAllAccess);
  h.remote.length = 8192;
  h.remote.peer = 0;
  return h;
}

const ProfileCounters& counters(const Transport& t) { return *profile_counters(t); }

TEST(ProfileRules, LocalMrRequiresTheDescriptor) {
  Held h = held_local();
  std::byte* buf = h.mr->data();
  EXPECT_EQ(h.t->post_send(0, buf, 64, nullptr, 1, kSignal), Status::failed);
  EXPECT_EQ(counters(*h.t).missing_descriptor, 1u);
  EXPECT_NE(h.t->last_error().find("profile strict: -FI_EINVAL"), std::string::npos);
  EXPECT_NE(h.t->last_error().find("FI_MR_LOCAL"), std::string::npos);
  EXPECT_EQ(h.t->post_recv(0, buf, 64, nullptr, 1), Status::failed);
  EXPECT_EQ(h.t->post_write(0, buf, 64, nullptr, h.remote, 0, 1, kSignal), Status::failed);
  EXPECT_EQ(h.t->post_read(0, buf, 64, nullptr, h.remote, 0, 1, kSignal), Status::failed);
  EXPECT_EQ(counters(*h.t).missing_descriptor, 4u);
  // An inject is copied at post time: it needs no descriptor (the unconnected inner transport
  // may refuse it for its own reasons).
  (void)h.t->post_send(0, buf, 16, nullptr, 1, kInject);
  EXPECT_EQ(counters(*h.t).missing_descriptor, 4u);
}

TEST(ProfileRules, LocalMrRequiresTheBufferInsideItsRegion) {
  Held h = held_local();
  std::vector<std::byte> outside(64);
  EXPECT_EQ(h.t->post_send(0, outside.data(), 64, h.mr->desc(), 1, kSignal), Status::failed);
  EXPECT_EQ(h.t->post_send(0, h.mr->data() + 8192 - 32, 64, h.mr->desc(), 1, kSignal),
            Status::failed);
  EXPECT_EQ(counters(*h.t).foreign_descriptor, 2u);
  int not_ours = 0;
  EXPECT_EQ(h.t->post_send(0, h.mr->data(), 64, &not_ours, 1, kSignal), Status::failed);
  EXPECT_EQ(counters(*h.t).foreign_descriptor, 3u);
  EXPECT_NE(h.t->last_error().find("did not register"), std::string::npos);
}

TEST(ProfileRules, InjectLargerThanInjectSizeFails) {
  Held h = held_local();
  EXPECT_EQ(h.t->post_send(0, h.mr->data(), 33, h.mr->desc(), 1, kInject), Status::failed);
  EXPECT_EQ(counters(*h.t).inject_too_large, 1u);
  EXPECT_NE(h.t->last_error().find("exceeds inject_size 32"), std::string::npos);
}

TEST(ProfileRules, MessageLargerThanMaxMsgSizeFails) {
  Held h = held_local();
  EXPECT_EQ(h.t->post_send(0, h.mr->data(), 4097, h.mr->desc(), 1, kSignal), Status::failed);
  EXPECT_EQ(h.t->post_write(0, h.mr->data(), 8192, h.mr->desc(), h.remote, 0, 1, kSignal),
            Status::failed);
  EXPECT_EQ(counters(*h.t).message_too_large, 2u);
  EXPECT_NE(h.t->last_error().find("-FI_EMSGSIZE"), std::string::npos);
}

TEST(ProfileRules, CqDataWiderThanTheProfileFails) {
  Held h = held_local();
  EXPECT_EQ(h.t->post_write(0, h.mr->data(), 8, h.mr->desc(), h.remote, 0, 1, kSignal,
                            std::uint64_t{1} << 32),
            Status::failed);
  EXPECT_EQ(counters(*h.t).cq_data_too_wide, 1u);
  EXPECT_NE(h.t->last_error().find("wider than 4 bytes"), std::string::npos);
}

TEST(ProfileRules, AnOperationTheProfileLacksFails) {
  Held h = held_local();
  std::uint64_t* result = reinterpret_cast<std::uint64_t*>(h.mr->data());
  EXPECT_EQ(
      h.t->post_atomic(0, AtomicOp::fetch_add, 1, 0, result, h.mr->desc(), h.remote, 0, 1, kSignal),
      Status::failed);
  EXPECT_EQ(counters(*h.t).missing_op, 1u);
  EXPECT_NE(h.t->last_error().find("-FI_ENOSYS"), std::string::npos);
}

TEST(ProfileRules, LocalPowersAreHidden) {
  Held h = held_local();
  EXPECT_FALSE(h.t->caps().peer_mapping);
  EXPECT_FALSE(h.t->caps().cross_memory_attach);
  std::array<Completion, 4> out;
  EXPECT_EQ(h.t->poll_rx_in_place(out), -1);
  EXPECT_EQ(h.t->map_peer(0, h.remote, 0, 8), nullptr);
}

// Inside the envelope everything works end to end, and the queue depths answer again (never
// fail) once full: four signalled sends in flight, the fifth waits until a completion exists.
class ProfileInside : public ::testing::TestWithParam<const char*> {};

TEST_P(ProfileInside, SendsWritesAndDepthsWorkUnderTheProfile) {
  TransportOptions o;
  o.provider = GetParam();
  o.endpoint = EndpointType::rdm;
  o.ops = {Op::send, Op::write, Op::writedata};
  const ProviderProfile p = strict_profile();
  std::string err = testing::run_ranks(
      2, o,
      [&](int rank, Transport& t, Bootstrap& boot) {
        auto mr = t.allocate(4096, kAllAccess);
        const auto key = t.export_key(*mr);
        auto keys = boot.allgather(key);
        const RemoteMemory peer = t.import_key(1 - rank, keys[static_cast<std::size_t>(1 - rank)]);
        if (rank == 1) {
          // Four receives fill the receive depth; a fifth answers again until one completes.
          int posted = 0;
          for (; posted < 4; ++posted)
            ASSERT_EQ(t.post_recv(0, mr->data() + 64 * posted, 64, mr->desc(), 100 + posted),
                      Status::ok)
                << t.last_error();
          EXPECT_EQ(t.post_recv(0, mr->data() + 64 * posted, 64, mr->desc(), 100 + posted),
                    Status::again);
          EXPECT_GE(profile_counters(t)->queue_full, 1u);
          boot.barrier([&] { t.progress(); });
          // Every message once and intact, in whichever posted receive it landed, and the
          // write's CQ data (in any order with the messages: they are separate operations).
          std::vector<int> seen;
          bool wrote = false;
          while (seen.size() < 6 || !wrote) {
            const Completion c = testing::wait_one(t, testing::Cq::rx);
            if (c.kind == CompletionKind::remote_write) {
              EXPECT_EQ(c.data, 0xfeedu);
              wrote = true;
              continue;
            }
            ASSERT_EQ(c.kind, CompletionKind::recv);
            ASSERT_EQ(c.length, 64u);
            const std::byte* slot = mr->data() + 64 * (c.context - 100);
            for (int b = 0; b < 64; ++b) ASSERT_EQ(slot[b], slot[0]);
            seen.push_back(static_cast<int>(slot[0]));
            if (posted < 7) {  // the seventh for a write's CQ data, where it takes a receive
              ASSERT_EQ(t.post_recv(0, mr->data() + 64 * posted, 64, mr->desc(), 100 + posted),
                        Status::ok)
                  << t.last_error();
              ++posted;
            }
          }
          std::sort(seen.begin(), seen.end());
          EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 4, 5, 6}));
          EXPECT_EQ(static_cast<int>(mr->data()[1024]), 9);
        } else {
          boot.barrier([&] { t.progress(); });
          for (int i = 0; i < 6; ++i) std::memset(mr->data() + 64 * i, i + 1, 64);
          // Again (a full queue, or a provider still connecting) is answered by reaping
          // completions, which drives progress, and posting again.
          const auto retry = [&](auto post) {
            Status st;
            std::array<Completion, 4> reaped;
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while ((st = post()) == Status::again && std::chrono::steady_clock::now() < deadline)
              if (t.poll_tx(reaped) < 0) return Status::failed;
            return st;
          };
          for (int i = 0; i < 6; ++i)
            ASSERT_EQ(retry([&] {
                        return t.post_send(1, mr->data() + 64 * i, 64, mr->desc(), i, kSignal);
                      }),
                      Status::ok)
                << t.last_error();
          EXPECT_GE(profile_counters(t)->queue_full, 1u)
              << "the fifth signalled send did not wait for the depth of 4";
          std::memset(mr->data() + 1024, 9, 8);
          ASSERT_EQ(retry([&] {
                      return t.post_write(1, mr->data() + 1024, 8, mr->desc(), peer, 1024, 9,
                                          kSignal, std::uint64_t{0xfeed});
                    }),
                    Status::ok)
              << t.last_error();
        }
      },
      [&](std::unique_ptr<Transport> inner) {
        // Completions held back for a few polls (the fault wrapper) are completions that do
        // not exist yet: the fifth signalled send finds four in flight, deterministically.
        FaultPlan slow;
        slow.delay_completions = 3;
        return make_profile_transport(make_fault_transport(std::move(inner), slow), p, o.ops);
      });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, ProfileInside, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace fabflow
