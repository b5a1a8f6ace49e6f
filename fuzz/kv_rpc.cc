// Fuzz target: key-value requests as a server executes them (Executor, src/kv/table.h) on a
// fresh partition: any bytes, any length, keys of other servers, operations the design does
// not take by RPC. Checked against a model: the answer's length fits, its code is one of the
// protocol's, and in the herd design (every operation an RPC) GET, PUT and DELETE agree with a
// map of what was stored.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "kv/table.h"

namespace kd = fabflow::kv::detail;
using fabflow::kv::Code;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  fabflow::kv::Options o;
  o.design = data[0] & 1 ? fabflow::kv::Design::atomic : fabflow::kv::Design::herd;
  o.value_bytes = 8 + (data[0] >> 1) % 57;  // 8..64
  o.capacity = 24;                          // small: the table fills within one input
  const int servers = 1 + data[1] % 3;
  const int me = (data[1] >> 2) % servers;
  const kd::Layout l = kd::Layout::for_capacity(o.capacity, o.value_bytes);
  std::vector<std::uint64_t> memory(l.region_bytes / 8 + 1);
  kd::Table table(reinterpret_cast<std::byte*>(memory.data()), l);
  kd::Executor exec(table, o, me, servers);
  std::map<fabflow::kv::Key, std::vector<std::byte>> model;
  std::vector<std::byte> ans(kd::kAnswerHeader + o.value_bytes);
  // The rest: requests, each a length byte (scaled to reach past a full request) and its bytes.
  std::size_t at = 2;
  while (at < size) {
    const std::size_t len = std::size_t{data[at++]} * 2 % (kd::kRpcHeader + o.value_bytes + 9);
    if (size - at < len) break;
    const std::span<const std::byte> req(reinterpret_cast<const std::byte*>(data + at), len);
    at += len;
    const std::size_t n = exec.execute(req, ans);
    const auto code = static_cast<std::uint8_t>(ans[0]);
    if (n > ans.size() || n < kd::kAnswerHeader) __builtin_trap();
    if (code > static_cast<std::uint8_t>(Code::full) && code != kd::kExists &&
        code != kd::kMalformed)
      __builtin_trap();
    if (o.design != fabflow::kv::Design::herd || len < kd::kRpcHeader) continue;
    fabflow::kv::Key key;
    std::memcpy(key.data(), req.data() + 8, fabflow::kv::kKeyBytes);
    const auto op = static_cast<kd::RpcOp>(req[0]);
    const bool whole = len == kd::kRpcHeader + o.value_bytes, bare = len == kd::kRpcHeader;
    const bool mine = kd::server_of(key, servers) == me;
    const bool valid = mine && ((op == kd::RpcOp::get && bare) || (op == kd::RpcOp::put && whole) ||
                                (op == kd::RpcOp::del && bare));
    if (!valid) {
      if (code != kd::kMalformed) __builtin_trap();
      continue;
    }
    const auto it = model.find(key);
    if (op == kd::RpcOp::get) {
      if (it == model.end() ? code != static_cast<std::uint8_t>(Code::not_found)
                            : code != static_cast<std::uint8_t>(Code::ok) || n != ans.size() ||
                                  std::memcmp(ans.data() + kd::kAnswerHeader, it->second.data(),
                                              o.value_bytes) != 0)
        __builtin_trap();
    } else if (op == kd::RpcOp::put) {
      if (code == static_cast<std::uint8_t>(Code::ok))
        model[key].assign(req.begin() + kd::kRpcHeader, req.end());
      else if (code != static_cast<std::uint8_t>(Code::full) || it != model.end())
        __builtin_trap();  // only a new key may find the partition full
    } else {
      if (code != static_cast<std::uint8_t>(it == model.end() ? Code::not_found : Code::ok))
        __builtin_trap();
      if (it != model.end()) model.erase(it);
    }
  }
  return 0;
}
