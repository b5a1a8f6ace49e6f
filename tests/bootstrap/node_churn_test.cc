// One server, 50 clients over its life: clients connect in waves of five while others are in the
// middle of their streams; after the first wave, in every wave one is SIGKILLed mid-stream and in
// every other wave one is SIGSTOPped, and one more is killed in the last (10 killed, 5 stopped).
// Every survivor's items arrive in order, exactly once, with the checksum the client computed;
// every departure is reported within the session's timeout + 1 s; and once the last client has gone
// the server's fds, threads, shared mappings and /dev/shm files are back to what they were after
// its first wave of clients (the state a server keeps for nobody).
//
// The parent stays single-threaded and opens no transport: the server and every client are
// forked children (tests/support/forked.h).
#include <dirent.h>
#include <fabflow/flow.h>
#include <fabflow/node.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/shm_regions.h"
#include "support/forked.h"

namespace fabflow::churn_test {
namespace {

using namespace std::chrono_literals;
using test::Child;
using test::ChildIo;

constexpr auto kSessionTimeout = 2000ms;
constexpr int kClients = 50;
constexpr int kWave = 5;  // clients connected at once
constexpr std::uint64_t kItems = 4000;
constexpr std::uint64_t kForever = std::uint64_t{1} << 40;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();  // CLOCK_MONOTONIC: one clock for every process of the host
}

NodeOptions node_options() {
  NodeOptions o;
  o.secret = "churn-test";
  o.timeout = kSessionTimeout;
  o.handshake = 1000ms;
  return o;
}

flow::QueueOptions queue_options() {
  flow::QueueOptions q;
  q.item_bytes = 64;
  return q;
}

TransportOptions transport_for(const std::string& provider) {
  TransportOptions t;
  t.provider = provider;
  return t;
}

struct Item {
  std::uint64_t word[8];
};
Item item_for(std::uint64_t client, std::uint64_t seq) {
  Item it{};
  it.word[0] = client << 40 | seq;
  it.word[1] = ~it.word[0];
  for (int w = 2; w < 8; ++w) it.word[w] = it.word[0] * 0x9e3779b97f4a7c15ull + w;
  return it;
}
std::uint64_t mix(std::uint64_t sum, const Item& it) {
  for (std::uint64_t w : it.word) sum = (sum ^ w) * 1099511628211ull;
  return sum;
}

std::size_t entries(const std::string& dir, bool (*counts)(const std::string&) = nullptr) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && (!counts || counts(name))) ++n;
    }
    ::closedir(d);
  }
  return n;
}

bool shm_region_of_mine(const std::string& name) { return shm_region_owner(name) == ::getpid(); }

// What the server holds for its peers, as the kernel sees it: fds, threads, shared mappings (the
// local transport's memfd segments and the peers' mapped ones, shm's regions) and the /dev/shm
// regions it owns. Private anonymous mappings are left out: malloc's heaps and the stacks glibc
// keeps for later threads grow and shrink with no peer behind them.
std::string resources() {
  std::ifstream maps("/proc/self/maps");
  std::size_t shared = 0;
  for (std::string line; std::getline(maps, line);) {
    const auto perms = line.find(' ') + 1;
    if (perms + 3 < line.size() && line[perms + 3] == 's') ++shared;
  }
  std::ostringstream s;
  s << "fds=" << entries("/proc/self/fd") - 1  // the directory's own fd
    << " threads=" << entries("/proc/self/task") << " shared-mappings=" << shared
    << " shm=" << entries("/dev/shm", shm_region_of_mine);
  return s.str();
}

// The server's side of one session: every item of one client in order; one line either way.
std::string serve_session(Peer& peer, const std::string& provider) {
  std::int64_t client = -1;
  std::uint64_t n = 0, sum = 14695981039346656037ull;
  try {
    client = static_cast<std::int64_t>(
        allgather_value(peer.bootstrap(), std::uint64_t{0}, "client id")[1] & 0xffffff);
    auto q = flow::open_consumer(peer, queue_options(), transport_for(provider));
    for (;;) {
      Item it;
      std::size_t len = 0;
      const Status s = q->dequeue(std::as_writable_bytes(std::span(it.word)), &len, 10s);
      if (s == Status::closed) break;
      if (s != Status::ok) throw Error(q->error());
      const Item want = item_for(static_cast<std::uint64_t>(client), n);
      if (len != sizeof it.word || std::memcmp(&it, &want, sizeof it) != 0)
        throw Error("item " + std::to_string(n) + " out of order or torn");
      sum = mix(sum, it);
      ++n;
    }
    q.session->barrier([&] { q.transport->progress(); });
  } catch (const std::exception& e) {
    const std::int64_t at = now_ns();
    return "failed client=" + std::to_string(client) + " at=" + std::to_string(at) +
           " items=" + std::to_string(n) + " why=" + e.what();
  }
  char line[128];
  std::snprintf(line, sizeof line, "ok client=%" PRId64 " items=%" PRIu64 " sum=%016" PRIx64,
                client, n, sum);
  return line;
}

// The server: serves each client on a thread of its own; at each go() from the parent it
// reports what it holds once every session so far has ended (the first go: the baseline, the
// second: the end, after which it exits).
int server(const ChildIo& io, const std::string& provider) {
  Node node(node_options());
  node.listen("127.0.0.1:0");
  io.say("listening " + node.address());
  std::mutex mu;
  std::vector<std::thread> threads;
  std::atomic<int> running{0};
  for (int reports = 0; reports < 2;) {
    std::unique_ptr<Peer> peer;
    try {
      peer = node.accept(50ms);
    } catch (const std::exception& e) {
      io.say(std::string("failed client=-1 at=0 items=0 why=") + e.what());
    }
    if (peer) {
      ++running;
      threads.emplace_back([&, p = std::move(peer)]() mutable {
        const std::string line = serve_session(*p, provider);
        p.reset();
        std::lock_guard lock(mu);
        io.say(line);
        --running;
      });
    }
    if (!io.wait_go(0ms)) continue;
    while (running > 0) std::this_thread::sleep_for(10ms);
    for (std::thread& t : threads) t.join();
    threads.clear();
    if (const char* dump = std::getenv("CHURN_MAPS")) {
      std::ifstream in("/proc/self/maps");
      std::ofstream(std::string(dump) + (reports == 0 ? ".baseline" : ".end")) << in.rdbuf();
    }
    io.say(std::string(reports == 0 ? "baseline " : "end ") + resources());
    ++reports;
  }
  return 0;
}

enum class Fate { lives, killed, stopped };

// A client: connects, streams its items (a victim streams until it is killed) and reports its
// checksum.
int client(const ChildIo& io, const std::string& address, const std::string& provider,
           std::uint64_t id, Fate fate) {
  auto peer = Node(node_options()).connect(address, 10s);
  allgather_value(peer->bootstrap(), id, "client id");
  auto q = flow::open_producer(*peer, queue_options(), transport_for(provider));
  const std::uint64_t items = fate == Fate::lives ? kItems : kForever;
  std::uint64_t sum = 14695981039346656037ull;
  for (std::uint64_t i = 0; i < items; ++i) {
    const Item it = item_for(id, i);
    if (q->enqueue(std::as_bytes(std::span(it.word)), 10s) != Status::ok)
      throw Error("enqueue: " + q->error());
    sum = mix(sum, it);
    if (i == 1000 && fate != Fate::lives) io.say("streaming");
  }
  if (q->close(10s) != Status::ok) throw Error("close: " + q->error());
  q.session->barrier([&] { q.transport->progress(); });
  char line[96];
  std::snprintf(line, sizeof line, "sent client=%" PRIu64 " items=%" PRIu64 " sum=%016" PRIx64, id,
                items, sum);
  io.say(line);
  return 0;
}

std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string word;
  in >> word;
  f["kind"] = word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) continue;
    f[word.substr(0, eq)] = word.substr(eq + 1);
    if (word.substr(0, eq) == "why") {  // the rest of the line
      std::string rest;
      std::getline(in, rest);
      f["why"] += rest;
      break;
    }
  }
  return f;
}

class NodeChurn : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeChurn, FiftyClientsComeAndGoAndTheServerEndsAsItBegan) {
  const std::string provider = GetParam();
  Child srv = Child::spawn([&](const ChildIo& io) { return server(io, provider); });
  const auto listening = srv.next_line(10s);
  ASSERT_TRUE(listening && listening->starts_with("listening ")) << srv.output();
  const std::string address = listening->substr(10);

  std::map<std::uint64_t, std::string> sent;       // client -> its "sent" line
  std::map<std::uint64_t, std::int64_t> departed;  // victim -> when it was killed or stopped
  std::map<std::uint64_t, Fate> fates;
  std::vector<std::string> served;  // the server's session lines
  auto server_lines = [&](std::size_t want, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (served.size() < want && std::chrono::steady_clock::now() < deadline)
      if (auto l = srv.next_line(100ms)) served.push_back(*l);
  };
  auto run_client = [&](std::uint64_t id, Fate fate) {
    fates[id] = fate;
    return Child::spawn(
        [&, id, fate](const ChildIo& io) { return client(io, address, provider, id, fate); });
  };

  {  // the first wave, side by side: after it the server holds what it keeps for nobody (what
     // libfabric and the transports set up once, on first use)
    std::vector<Child> first;
    for (std::uint64_t id = 0; id < kWave; ++id) first.push_back(run_client(id, Fate::lives));
    for (std::uint64_t id = 0; id < kWave; ++id) {
      ASSERT_EQ(first[id].finish(30s), 0) << first[id].output();
      sent[id] = first[id].output();
    }
    server_lines(kWave, 10s);
    srv.go();
    const auto baseline = srv.next_line(10s);
    ASSERT_TRUE(baseline) << srv.output();
    served.insert(served.begin(), *baseline);
  }
  std::vector<Child> stopped;
  for (std::uint64_t wave = 1; wave * kWave < kClients; ++wave) {
    std::vector<Child> clients;
    std::vector<std::uint64_t> ids;
    for (int k = 0; k < kWave && wave * kWave + k < kClients; ++k) {
      const std::uint64_t id = wave * kWave + k;
      const bool last = (wave + 1) * kWave >= kClients;
      const Fate fate = (k == 0 || (last && k == kWave - 1)) ? Fate::killed
                        : (k == 1 && wave % 2 == 1)          ? Fate::stopped
                                                             : Fate::lives;
      clients.push_back(run_client(id, fate));
      ids.push_back(id);
    }
    for (std::size_t k = 0; k < clients.size(); ++k) {
      if (fates[ids[k]] == Fate::lives) continue;
      const auto line = clients[k].next_line(20s);
      ASSERT_TRUE(line && *line == "streaming")
          << "client " << ids[k] << ": " << clients[k].output();
      departed[ids[k]] = now_ns();
      clients[k].kill(fates[ids[k]] == Fate::killed ? SIGKILL : SIGSTOP);
    }
    for (std::size_t k = 0; k < clients.size(); ++k) {
      if (fates[ids[k]] == Fate::lives) {
        ASSERT_EQ(clients[k].finish(30s), 0) << "client " << ids[k] << ": " << clients[k].output();
        sent[ids[k]] = clients[k].output();
      } else if (fates[ids[k]] == Fate::stopped) {
        stopped.push_back(std::move(clients[k]));  // stays stopped until the server gave up
      }
    }
  }
  server_lines(kClients + 1, 30s);  // the baseline line, then one per session
  std::string missing;
  for (const auto& [id, fate] : fates) {
    const std::string tag = " client=" + std::to_string(id) + " ";
    if (std::ranges::none_of(
            served, [&](const std::string& l) { return l.find(tag) != std::string::npos; }))
      missing += " " + std::to_string(id) +
                 (fate == Fate::lives    ? ""
                  : fate == Fate::killed ? "(killed)"
                                         : "(stopped)");
  }
  EXPECT_EQ(missing, "") << "sessions the server never reported";
  stopped.clear();  // SIGKILLed and reaped
  srv.go();
  const auto end = srv.next_line(20s);
  ASSERT_EQ(srv.finish(10s), 0) << srv.output();
  ASSERT_EQ(served.size(), std::size_t{kClients} + 1) << srv.output();

  std::size_t ok = 0, failed = 0;
  for (std::size_t i = 1; i < served.size(); ++i) {
    auto f = fields(served[i]);
    const auto id = static_cast<std::uint64_t>(std::stoll(f["client"]));
    ASSERT_TRUE(fates.count(id)) << served[i];
    if (f["kind"] == "ok") {
      ++ok;
      ASSERT_EQ(fates[id], Fate::lives) << served[i];
      auto c = fields(sent[id]);
      EXPECT_EQ(c["items"], f["items"]) << served[i];
      EXPECT_EQ(c["sum"], f["sum"]) << served[i];
    } else {
      ++failed;
      ASSERT_EQ(f["kind"], "failed") << served[i];
      ASSERT_NE(fates[id], Fate::lives) << served[i];
      const double after_s = (std::stoll(f["at"]) - departed[id]) / 1e9;
      EXPECT_LT(after_s, (kSessionTimeout + 1000ms).count() / 1e3)
          << "client " << id << " (" << (fates[id] == Fate::killed ? "killed" : "stopped")
          << ") reported " << after_s << " s after it departed: " << served[i];
      EXPECT_NE(f["why"].find("rank 1"), std::string::npos) << served[i];
    }
  }
  EXPECT_EQ(ok, sent.size());
  EXPECT_EQ(failed, 15u);  // 10 killed, 5 stopped
  ASSERT_TRUE(end && end->starts_with("end ")) << srv.output();
  EXPECT_EQ(end->substr(4), served[0].substr(9)) << "baseline: " << served[0] << "\n"
                                                 << "end:      " << *end;
}

INSTANTIATE_TEST_SUITE_P(Node, NodeChurn, ::testing::Values("local", "shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fabflow::churn_test
