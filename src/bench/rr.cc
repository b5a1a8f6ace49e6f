// The request-response benchmark (seed 000): requester processes (each with T threads) and
// responder processes exchange requests and responses over a channel per (pattern, model,
// response size). Requester threads measure every round trip; both sides report CPU per
// message. Ranks [0, requesters) request, the rest respond. This file checks the parameters,
// runs each configuration (rr_config.cc) and combines the ranks' summaries into its row.
#include <fabflow/bench/raw.h>
#include <fabflow/bench/rr.h>
#include <fabflow/bootstrap.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "bench/engine.h"
#include "bench/rr_config.h"
#include "common/affinity.h"

namespace fabflow {
namespace {

RrCpu side_cpu(const std::vector<bench_rr::RankSummary>& all, std::uint32_t role,
               const RrParams& p) {
  double cpu = 0, instr = 0, cycles = 0, ir = 0;
  std::uint64_t msgs = 0;
  bool counters = true, callgrind = p.callgrind;
  for (const auto& s : all) {
    if (s.role != role) continue;
    cpu += s.cpu_s;
    msgs += s.messages;
    instr += static_cast<double>(s.instructions);
    cycles += static_cast<double>(s.cycles);
    counters = counters && s.counters_ok;
    if (s.callgrind_ir < 0) callgrind = false;
    ir += s.callgrind_ir;
  }
  RrCpu c;
  double n = static_cast<double>(std::max<std::uint64_t>(msgs, 1));
  c.ns_per_msg = cpu * 1e9 / n;
  if (counters) {
    c.instructions_per_msg = instr / n;
    c.cycles_per_msg = cycles / n;
  }
  if (callgrind) c.callgrind_ir_per_msg = ir / n;
  return c;
}

// Rank 0 combines every rank's summary and samples into the row.
void collect(const RrParams& p, Bootstrap& boot, const bench_rr::RankSummary& mine,
             std::vector<double>& samples, RrRow& row) {
  const auto all = allgather_value(boot, mine, "rr bench: summary");
  const auto rank_samples =
      allgather_values(boot, std::span<const double>(samples), "rr bench: samples");
  if (boot.rank() != 0) return;
  std::vector<double> every;
  std::uint64_t served = 0, sent = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    every.insert(every.end(), rank_samples[r].begin(), rank_samples[r].end());
    if (all[r].role == 0) {
      row.requests += all[r].measured;
      row.requests_per_s += all[r].rate;
      row.seconds = std::max(row.seconds, all[r].seconds);
      row.idle_turns += all[r].idle_turns;
      sent += all[r].messages;
    } else {
      served += all[r].served;
      row.responder_scans += all[r].scans;
      row.empty_scans += all[r].empty_scans;
      row.mailboxes_read += all[r].mailboxes_read;
      row.mailboxes_with_request += all[r].mailboxes_with_request;
    }
  }
  // Every request answered exactly once: the responders served what the requesters got.
  if (served != sent)
    throw Error("rr bench: responders served " + std::to_string(served) +
                " requests, requesters got " + std::to_string(sent) + " responses");
  row.latency = summarize(every);
  row.mbps = row.requests_per_s * static_cast<double>(row.response_bytes) / 1e6;
  row.requester = side_cpu(all, 0, p);
  row.responder = side_cpu(all, 1, p);
}

// --callgrind: every responder's profile (its Ir by where the code lives, and its functions
// with the most) to rank 0, which adds them into the row. Requesters send nothing.
void collect_profile(Bootstrap& boot, bool responder, const callgrind::Profile& mine, RrRow& row) {
  constexpr std::size_t kSent = 40, kTop = 10, kNameMax = 1024;
  nlohmann::json j = nlohmann::json::object();
  if (responder) {
    double by_place[4] = {};
    for (const auto& f : mine.functions) by_place[static_cast<int>(callgrind::place_of(f))] += f.ir;
    j["total"] = mine.total;
    j["places"] = by_place;
    nlohmann::json top = nlohmann::json::array();
    for (std::size_t i = 0; i < std::min(kSent, mine.functions.size()); ++i)
      top.push_back({mine.functions[i].name.substr(0, kNameMax),
                     mine.functions[i].object.substr(0, kNameMax), mine.functions[i].ir});
    j["top"] = std::move(top);
  }
  const std::string text = j.dump();
  const auto all = boot.allgather(std::as_bytes(std::span(text.data(), text.size())));
  if (boot.rank() != 0) return;
  callgrind::Profile sum;
  double places[4] = {};
  bool any = false;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto bad = [&] {
      return PeerError(static_cast<int>(r), "rr bench: rank " + std::to_string(r) +
                                                " sent a malformed callgrind profile");
    };
    const auto got = nlohmann::json::parse(
        reinterpret_cast<const char*>(all[r].data()),
        reinterpret_cast<const char*>(all[r].data()) + all[r].size(), nullptr, false);
    if (!got.is_object()) throw bad();
    if (got.empty()) continue;  // a requester
    const auto finite = [](const nlohmann::json& v) {
      return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0;
    };
    if (!got.contains("total") || !finite(got["total"]) || !got.contains("places") ||
        !got["places"].is_array() || got["places"].size() != 4 || !got.contains("top") ||
        !got["top"].is_array() || got["top"].size() > kSent)
      throw bad();
    callgrind::Profile p;
    p.total = got["total"].get<double>();
    for (std::size_t k = 0; k < 4; ++k) {
      if (!finite(got["places"][k])) throw bad();
      places[k] += got["places"][k].get<double>();
    }
    for (const auto& f : got["top"]) {
      if (!f.is_array() || f.size() != 3 || !f[0].is_string() || !f[1].is_string() ||
          !finite(f[2]) || f[0].get_ref<const std::string&>().size() > kNameMax ||
          f[1].get_ref<const std::string&>().size() > kNameMax)
        throw bad();
      p.functions.push_back({f[0].get<std::string>(), f[1].get<std::string>(), f[2].get<double>()});
    }
    callgrind::merge(sum, p);
    any = true;
  }
  if (!any || sum.total <= 0) return;
  RrProfile out;
  out.total_ir = sum.total;
  out.transport = places[static_cast<int>(callgrind::Place::transport)] / sum.total;
  out.libc = places[static_cast<int>(callgrind::Place::libc)] / sum.total;
  out.fabflow = places[static_cast<int>(callgrind::Place::fabflow)] / sum.total;
  out.other = std::max(0.0, 1.0 - out.transport - out.libc - out.fabflow);
  for (std::size_t i = 0; i < std::min(kTop, sum.functions.size()); ++i)
    out.top.push_back(
        {sum.functions[i].name, sum.functions[i].object, sum.functions[i].ir / sum.total});
  row.responder_profile = std::move(out);
}

// The raw 64 B write ping-pong of the same provider, on its own transport (1:1 only), into
// `row` on rank 0; `keep`: its round trips are appended there too.
void raw_reference(const RrParams& p, Bootstrap& boot, RrRow& row,
                   std::vector<double>* keep = nullptr) {
  RawParams rp;
  rp.keep_samples = keep != nullptr;
  rp.op = Op::write;
  rp.sizes = {64};
  rp.iterations = p.requests;
  rp.warmup = p.warmup;
  rp.test = RawTest::latency;
  rp.target = p.target;
  rp.target.timeout_ms = std::max<std::uint64_t>(p.target.timeout_ms, 2000);
  rp.progress = p.progress;
  if (!probe_transport(p.target.transport({Op::write}, boot.local_address())).supports(Op::write))
    return;
  RawResult r = run_raw(rp, boot);
  if (boot.rank() == 0 && !r.rows.empty()) {
    // run_raw reports half the round trip for ping-pong operations.
    row.raw_write_rtt = r.rows.front().latency.scaled(2);
    row.raw_measured = true;
    if (keep)
      for (double half : r.rows.front().samples) keep->push_back(2 * half);
  }
}

// Adds a round's summary to the sum of the rounds before it (the first round's, at least).
void merge(bench_rr::RankSummary& sum, const bench_rr::RankSummary& s) {
  // Rates add as requests over time: weigh each round's rate by its time.
  const double seconds = sum.seconds + s.seconds;
  sum.rate = seconds > 0 ? (sum.rate * sum.seconds + s.rate * s.seconds) / seconds : 0;
  sum.seconds = seconds;
  sum.role = s.role;
  sum.counters_ok = sum.counters_ok && s.counters_ok;
  sum.cpu_s += s.cpu_s;
  sum.messages += s.messages;
  sum.instructions += s.instructions;
  sum.cycles += s.cycles;
  sum.measured += s.measured;
  sum.served += s.served;
  sum.idle_turns += s.idle_turns;
  sum.scans += s.scans;
  sum.empty_scans += s.empty_scans;
  sum.mailboxes_read += s.mailboxes_read;
  sum.mailboxes_with_request += s.mailboxes_with_request;
  sum.callgrind_ir =
      sum.callgrind_ir < 0 || s.callgrind_ir < 0 ? -1 : sum.callgrind_ir + s.callgrind_ir;
}

void validate(const RrParams& p, const Bootstrap& boot) {
  using rr::Topology;
  if (p.requesters < 1 || p.responders < 1)
    throw UsageError("rr: at least one requester and one responder");
  if (boot.size() != p.requesters + p.responders)
    throw UsageError("rr: " + std::to_string(p.requesters) + " requesters + " +
                     std::to_string(p.responders) + " responders need that many processes, got " +
                     std::to_string(boot.size()));
  if (p.topology == Topology::one_to_one && (p.requesters != 1 || p.responders != 1))
    throw UsageError("rr: topology 1:1 needs exactly 1 requester and 1 responder");
  if (p.topology == Topology::n_to_one && p.responders != 1)
    throw UsageError("rr: topology N:1 needs exactly 1 responder");
  if (p.topology == Topology::n_to_m && p.responders < 2)
    throw UsageError("rr: topology N:M needs at least 2 responders (1 is N:1)");
  if (p.threads < 1 || p.depth < 1 || p.requests < 1)
    throw UsageError("rr: threads, depth and requests must be at least 1");
  if (p.empty_mailboxes_pct > 99) throw UsageError("rr: --empty-mailboxes must be in 0..99");
  if (p.idle_requesters_pct > 99) throw UsageError("rr: --idle-requesters must be in 0..99");
  if (p.reference && p.topology != Topology::one_to_one)
    throw UsageError("rr: --reference needs topology 1:1");
  if (p.verify &&
      (p.request_bytes < 8 || std::any_of(p.response_sizes.begin(), p.response_sizes.end(),
                                          [](std::size_t s) { return s < 8; })))
    throw UsageError("rr: verifying needs requests and responses of at least 8 bytes");
}

// --reference (1:1): params.reference_rounds rounds of [the row's configuration, the raw
// write ping-pong], the requests shared out among them. The row pools every round (figures,
// CPU, rates); its ratio is the median of the rounds' own p50 ratios. A row the provider cannot
// run still gets its reference.
void interleave(const RrParams& params, Bootstrap& boot, const Clock& clock,
                const rr::ChannelOptions& o, rr::Model model, const TransportOptions& to,
                RrRow& row) {
  const bool supported = row.unsupported.empty();
  const unsigned rounds =
      static_cast<unsigned>(std::min<std::uint64_t>(params.reference_rounds, params.requests));
  bench_rr::RankSummary sum;
  callgrind::Profile profile;
  std::vector<double> samples, raw, ratios;
  RrParams run = params;
  for (unsigned k = 0; k < rounds; ++k) {
    // The first params.requests % rounds rounds take one request more.
    run.requests = params.requests / rounds + (k < params.requests % rounds ? 1 : 0);
    double p50 = 0;
    if (supported) {
      bench_rr::Config config(run, boot, clock, o, model);
      const bench_rr::RankSummary s = config.run(to);
      if (k == 0)
        sum = s;
      else
        merge(sum, s);
      samples.insert(samples.end(), config.samples.begin(), config.samples.end());
      callgrind::merge(profile, config.profile);
      // Rank 0, the requester of 1:1: this round's p50, ranked as the row's is.
      p50 = summarize(config.samples).p50;
    }
    RrRow round;
    raw_reference(run, boot, round, &raw);
    if (boot.rank() == 0 && round.raw_measured && round.raw_write_rtt.p50 > 0 && p50 > 0)
      ratios.push_back(p50 / round.raw_write_rtt.p50);
    row.rounds = k + 1;
  }
  if (supported) collect(params, boot, sum, samples, row);
  if (supported && params.callgrind) collect_profile(boot, sum.role == 1, profile, row);
  if (boot.rank() != 0 || raw.empty()) return;
  row.raw_measured = true;
  row.raw_write_rtt = summarize(raw);
  row.vs_raw_write = median(ratios);
  row.round_ratios = std::move(ratios);
}

}  // namespace

RrResult run_rr(const RrParams& given, Bootstrap& boot,
                const std::function<void(const RrResult&, const RrRow&)>& on_row) {
  validate(given, boot);
  RrParams params = given;
  // A thread's own affinity, once pinned, is one CPU: the host's set must come from before.
  if (params.target.cpus.empty()) params.target.cpus = allowed_cpus();
  Clock clock;
  RrResult result = bench::start_result<RrResult>(params, boot, clock);
  const unsigned slots_per_requester =
      params.depth * params.threads;  // both models: the same outstanding requests per process
  for (rr::Pattern pattern : params.patterns)
    for (rr::Model model : params.models)
      for (std::size_t size : params.response_sizes) {
        rr::ChannelOptions o;
        o.pattern = pattern;
        o.mailbox = params.mailbox;
        o.request_bytes = params.request_bytes;
        o.response_bytes = size;
        o.inject = params.inject;
        o.signal_every = params.signal_every;
        o.peer_timeout = std::chrono::milliseconds(params.target.timeout_ms);
        const std::size_t active =
            static_cast<std::size_t>(params.requesters) * slots_per_requester;
        const unsigned pct = params.empty_mailboxes_pct;
        o.empty_mailboxes = pct ? (active * pct + (100 - pct) - 1) / (100 - pct) : 0;
        RrRow row;
        row.pattern = pattern;
        row.model = model;
        row.response_bytes = size;
        row.empty_mailboxes = rr::request_by_write(pattern) ? o.empty_mailboxes : 0;
        TransportOptions to = params.target.transport(rr::required_ops(o), boot.local_address());
        bench::size_queues(to, active);
        const bench::ProbedPoint probed = bench::probe_row(
            result.env, to, [&](const Capabilities& c) { return rr::why_unsupported(c, o); });
        row.unsupported = probed.unsupported;
        row.receive_queue = std::string(rr::receive_queue_kind(probed.caps));
        if (row.unsupported.empty() && !params.reference) {
          bench_rr::Config config(params, boot, clock, o, model);
          bench_rr::RankSummary mine = config.run(to);
          collect(params, boot, mine, config.samples, row);
          if (params.callgrind) collect_profile(boot, mine.role == 1, config.profile, row);
        } else if (params.reference) {
          // The reference runs beside the row, in interleaved rounds: a VM's speed changes
          // within seconds, and a ratio is only fair against what ran in the same state.
          // Collective: every rank takes part in every round.
          interleave(params, boot, clock, o, model, to, row);
        }
        bench::publish_row(boot, result, std::move(row), on_row);
      }
  return result;
}

}  // namespace fabflow
