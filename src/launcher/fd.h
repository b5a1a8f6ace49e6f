// Pipes and descriptors above the standard streams, shared by the launcher's sources.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "fabflow/status.h"

#include "common/errno_text.h"
#include "common/fd.h"

namespace fabflow::launcher {

using fabflow::Fd;

using fabflow::errno_text;

// Moves `fd` above 0..2 (so that dup2 onto a standard stream in a child never aliases it) and
// marks it close-on-exec. Throws Error on failure.
inline Fd above_stdio(Fd fd) {
  if (fd.get() > 2) return fd;
  Fd moved(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
  if (!moved) throw Error(errno_text("launcher: fcntl(F_DUPFD_CLOEXEC)"));
  return moved;
}

// A close-on-exec pipe whose ends are both above the standard streams.
struct Pipe {
  Fd read;
  Fd write;
};

inline Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(errno_text("launcher: pipe2"));
  Fd r(fds[0]), w(fds[1]);
  return {above_stdio(std::move(r)), above_stdio(std::move(w))};
}

}  // namespace fabflow::launcher
