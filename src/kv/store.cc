// The key-value store's shared parts: option checks, which design a provider can run, the
// blocking helpers and the verifying mode's history check (item.cc: the table layout and the
// item format).
#include <fabflow/bootstrap.h>
#include <fabflow/kv.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "common/bounded_wait.h"
#include "kv/internal.h"

namespace fabflow::kv {

std::vector<Op> required_ops(Design d) {
  switch (d) {
    case Design::herd: return {Op::write, Op::send};
    case Design::read: return {Op::write, Op::send, Op::read};
    case Design::atomic: return {Op::write, Op::send, Op::read, Op::cswap};
  }
  return {};
}

std::string why_unsupported(const Capabilities& caps, const Options& o) {
  if (auto m = missing_op(caps, required_ops(o.design)))
    return std::string(to_string(o.design)) + " needs " + std::string(to_string(m->op)) + ": " +
           m->why;
  return {};
}

void validate(const Options& o, int clients, int servers) {
  auto range = [](const char* what, std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
    if (v < lo || v > hi)
      throw UsageError("kv: " + std::string(what) + " must be in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + " (got " + std::to_string(v) + ")");
  };
  range("clients", clients < 0 ? 0 : static_cast<std::uint64_t>(clients), 1, kMaxClients);
  range("servers", servers < 0 ? 0 : static_cast<std::uint64_t>(servers), 1, kMaxServers);
  range("workers", o.workers, 1, kMaxWorkers);
  range("value size", o.value_bytes, 1, kMaxValueBytes);
  range("capacity", o.capacity, 1, kMaxCapacity);
  range("outstanding", o.outstanding, 1, kMaxOutstanding);
  range("batch", o.batch, 1, kMaxBatch);
  if (o.peer_timeout.count() <= 0) throw UsageError("kv: the peer timeout must be positive");
  if (o.lock_lease.count() <= 0) throw UsageError("kv: the lock lease must be positive");
  if (o.put_emulation == PutEmulation::two_atomics && o.design != Design::atomic)
    throw UsageError("kv: the two-atomics PUT emulation is the atomic design's (DrTM-KV), not " +
                     std::string(to_string(o.design)) + "'s");
}

void detail::check_end(const TransportOptions& to, Bootstrap& boot, int servers, const Options& o,
                       bool server) {
  const bool is_server = boot.rank() >= boot.size() - servers;
  if (is_server != server)
    throw UsageError("kv: rank " + std::to_string(boot.rank()) +
                     (is_server ? " is a server" : " is a client"));
  TransportOptions probe = to;
  probe.ops = required_ops(o.design);
  if (std::string why = why_unsupported(probe_transport(probe), o); !why.empty())
    throw UsageError("kv: " + why);
}

namespace {

// The steps every end's setup begins with: auto's choice (why() says it), the options' checks
// and the ranks' agreement on the design; then `make(options)` makes the end.
template <class Make>
auto open_end(const TransportOptions& given, Bootstrap& boot, int servers, const Options& o,
              Make make) {
  const TransportOptions to = for_ranks_of(given, boot);  // "auto": local on one host
  std::string why;
  const Options chosen = o.automatic ? detail::resolve_auto(to, o, &why) : o;
  validate(chosen, boot.size() - servers, servers);
  detail::agree_on_design(boot, chosen.design);
  return detail::AutoNote::note(make(to, chosen), why);
}

}  // namespace

std::unique_ptr<Server> make_server(const TransportOptions& to, Bootstrap& boot, int servers,
                                    const Options& o) {
  return open_end(to, boot, servers, o, [&](const TransportOptions& t, const Options& chosen) {
    return detail::make_table_server(t, boot, servers, chosen);
  });
}

std::unique_ptr<Client> make_client(const TransportOptions& to, Bootstrap& boot, int servers,
                                    const Options& o) {
  return open_end(to, boot, servers, o, [&](const TransportOptions& t, const Options& chosen) {
    return detail::make_table_client(t, boot, servers, chosen);
  });
}

namespace {

// Submits one operation and waits for its result (the only one in flight).
Result one(Client& c, Bootstrap& boot, OpKind kind, const Key& key,
           std::span<const std::byte> value, std::chrono::milliseconds timeout) {
  if (c.in_flight() != 0) throw UsageError("kv: a blocking call with operations in flight");
  BoundedWait watch(timeout, &boot, {}, 256);
  for (;;) {
    Status s = c.submit(kind, key, value, 0);
    if (s == Status::ok) break;
    if (s == Status::failed) throw Error(c.error());
    watch.idle("kv client", "submitting");
  }
  watch.reset();
  for (;;) {
    Result r;
    Status s = c.poll(&r);
    if (s == Status::ok) return r;
    if (s == Status::failed) throw Error(c.error());
    watch.idle("kv client", "waiting for an answer");
  }
}

}  // namespace

Code Client::get(Bootstrap& boot, const Key& key, std::vector<std::byte>* value) {
  Result r = one(*this, boot, OpKind::get, key, {}, std::chrono::milliseconds(4000));
  if (r.code == Code::ok && value) value->assign(r.value.begin(), r.value.end());
  return r.code;
}
Code Client::put(Bootstrap& boot, const Key& key, std::span<const std::byte> value) {
  return one(*this, boot, OpKind::put, key, value, std::chrono::milliseconds(4000)).code;
}
Code Client::del(Bootstrap& boot, const Key& key) {
  return one(*this, boot, OpKind::del, key, {}, std::chrono::milliseconds(4000)).code;
}

std::string check_history(std::span<const HistoryEntry> history, std::uint32_t loader) {
  // Per key: every write (PUT, DELETE, the load) as [start, end], and the GETs.
  struct Write {
    std::uint64_t start, end;
    bool del;
    std::uint32_t writer;
    std::uint64_t version;
  };
  std::map<std::uint64_t, std::vector<Write>> writes;
  std::map<std::uint64_t, std::vector<const HistoryEntry*>> gets;
  for (const HistoryEntry& e : history) {
    if (e.kind == OpKind::get) {
      gets[e.key].push_back(&e);
    } else if (e.code == Code::ok || e.kind == OpKind::del) {
      writes[e.key].push_back({e.start_ns, e.end_ns, e.kind == OpKind::del, e.writer,
                               e.kind == OpKind::del ? 0 : e.version});
    }
  }
  std::string out;
  int bad = 0;
  auto report = [&](const HistoryEntry& g, const std::string& why) {
    if (++bad <= 3)
      out += (out.empty() ? "" : "; ") + std::string("GET of key ") + std::to_string(g.key) +
             " at [" + std::to_string(g.start_ns) + ", " + std::to_string(g.end_ns) + "] " + why;
  };
  for (auto& [key, list] : gets) {
    std::vector<Write>& w = writes[key];
    w.push_back({0, 0, false, loader, 0});  // the load, before everything
    // latest_start[i]: the largest start among writes that ended before ends[i] (sorted by end):
    // a write W is superseded for a GET G when some write started after W ended and ended
    // before G started.
    std::vector<Write> by_end = w;
    std::sort(by_end.begin(), by_end.end(),
              [](const Write& a, const Write& b) { return a.end < b.end; });
    std::vector<std::uint64_t> max_start(by_end.size());
    for (std::size_t i = 0; i < by_end.size(); ++i)
      max_start[i] = std::max(i ? max_start[i - 1] : 0, by_end[i].start);
    auto superseded = [&](const Write& x, std::uint64_t g_start) {
      // The writes that ended strictly before g_start: a prefix of by_end.
      auto it = std::lower_bound(by_end.begin(), by_end.end(), g_start,
                                 [](const Write& a, std::uint64_t t) { return a.end < t; });
      if (it == by_end.begin()) return false;
      return max_start[static_cast<std::size_t>(it - by_end.begin()) - 1] > x.end;
    };
    for (const HistoryEntry* g : list) {
      bool explained = false;
      for (const Write& x : w) {
        const bool matches = g->code == Code::ok
                                 ? !x.del && x.writer == g->writer && x.version == g->version
                                 : x.del;
        if (!matches || x.start > g->end_ns) continue;
        if (!superseded(x, g->start_ns)) {
          explained = true;
          break;
        }
      }
      if (explained) continue;
      if (g->code == Code::ok)
        report(*g, "returned the value of writer " + std::to_string(g->writer) + " version " +
                       std::to_string(g->version) +
                       ", which no PUT wrote or which a later completed PUT had replaced");
      else
        report(*g, "found nothing although the key was written and not deleted");
    }
  }
  if (bad > 3) out += "; and " + std::to_string(bad - 3) + " more";
  return out;
}

}  // namespace fabflow::kv
