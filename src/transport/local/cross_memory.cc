// Cross-memory attach on the local transport: copies between this process and a peer process's
// address space by process_vm_readv / process_vm_writev (one copy, no registration, no shared
// mapping). The peer's pid is the one the kernel gave for its socket at connect (SO_PEERCRED),
// not one it sent; whether the kernel lets this process reach it (same uid, ptrace scope) is
// found by trying: a refusal fails the call with the errno's text.
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "common/errno_text.h"
#include "transport/local/local_transport.h"

namespace fabflow::local {

namespace {
// One system call moves at most this (the kernel may move less; the loop goes on).
constexpr std::size_t kMaxCopy = std::size_t{64} << 20;
}  // namespace

Status LocalTransport::copy_peer(int peer, PeerCopy dir, void* buf, std::uint64_t addr,
                                 std::size_t len) noexcept {
  PeerChannel* ch = usable(peer);
  if (!ch) return Status::failed;
  if (ch->pid <= 0) [[unlikely]]
    return fail("local: cross-memory attach: rank " + std::to_string(peer) + " has no process id");
  if (addr > UINT64_MAX - len) [[unlikely]]
    return fail("local: cross-memory attach: rank " + std::to_string(peer) +
                "'s address range wraps around");
  auto* here = static_cast<std::byte*>(buf);
  for (std::size_t done = 0; done < len;) {
    const std::size_t n = std::min(kMaxCopy, len - done);
    iovec l{here + done, n};
    iovec r{reinterpret_cast<void*>(addr + done), n};
    const ssize_t got = dir == PeerCopy::write ? ::process_vm_writev(ch->pid, &l, 1, &r, 1, 0)
                                               : ::process_vm_readv(ch->pid, &l, 1, &r, 1, 0);
    if (got <= 0)
      return fail(errno_text("local: cross-memory attach with rank " + std::to_string(peer),
                             got < 0 ? errno : EFAULT));
    done += static_cast<std::size_t>(got);
  }
  return Status::ok;
}

}  // namespace fabflow::local
