// memcached as bench kv's reference: started on loopback with its own port, loaded with every
// key through pipelined no-reply SETs, then driven by one client thread per fabric client, each
// with its own connection and one operation in flight (libmemcached's blocking calls), under
// the same workload generator. GETs are checked like the store's: found, whole, of their key.
#include "references/memcached.h"

#include <fabflow/kv_workload.h>
#include <fabflow/status.h>

#include <arpa/inet.h>
#include <fcntl.h>
#ifdef FABFLOW_HAVE_LIBMEMCACHED
#include <libmemcached/memcached.h>
#endif
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/affinity.h"
#include "common/fd.h"

namespace fabflow::references {

#ifndef FABFLOW_HAVE_LIBMEMCACHED
MemcachedResult run_memcached_reference(const MemcachedParams& p) {
  MemcachedResult r;
  r.clients = p.clients;
  r.server_threads = p.server_threads;
  r.skipped = "fabflow was built without libmemcached (Debian: libmemcached-dev; then rebuild)";
  return r;
}
#else
namespace {

using namespace std::chrono_literals;

// The first line `binary -V` prints ("memcached 1.6.18").
std::string version_of(const std::string& binary) {
  std::string cmd = "'" + binary + "' -V 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return "unknown";
  char line[128] = {};
  if (!std::fgets(line, sizeof line, p.get())) return "unknown";
  std::string v(line);
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// A loopback port nobody listens on now (memcached may still lose a race for it: retried).
int free_port() {
  Fd s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (!s || ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  return ntohs(a.sin_port);
}

bool accepts(int port) {
  Fd s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return s && ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// One memcached process, killed with this process (PR_SET_PDEATHSIG) and stopped on
// destruction.
class Server {
 public:
  // Empty error(): listening on `port`.
  Server(const std::vector<std::string>& argv, int port) {
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) {
      error_ = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    Fd err_read(err[0]), err_write(err[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      error_ = std::string("fork: ") + std::strerror(errno);
      return;
    }
    if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int devnull = ::open("/dev/null", O_RDWR);
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
      ::dup2(err_write.get(), 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    err_write.reset();
    ::fcntl(err_read.get(), F_SETFL, O_NONBLOCK);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        char text[256] = {};
        const ssize_t n = ::read(err_read.get(), text, sizeof text - 1);
        std::string why = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : "";
        if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
        error_ = "memcached exited at start" + (why.empty() ? "" : ": " + why);
        return;
      }
      if (accepts(port)) return;
      std::this_thread::sleep_for(5ms);
    }
    error_ = "memcached did not listen on 127.0.0.1:" + std::to_string(port) + " within 10 s";
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  const std::string& error() const noexcept { return error_; }

  // User plus system CPU seconds of all its threads so far (0 when unreadable).
  double cpu_seconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = all.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream fields(all.substr(close + 2));
    std::string f;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i)  // field 3 is the state; 14, 15: utime, stime
      if (i == 14 || i == 15) ticks += std::strtod(f.c_str(), nullptr);
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

 private:
  pid_t pid_ = -1;
  std::string error_;
};

struct McFree {
  void operator()(memcached_st* m) const noexcept { memcached_free(m); }
};
using Mc = std::unique_ptr<memcached_st, McFree>;

Mc connect(int port) {
  Mc m(memcached_create(nullptr));
  if (!m) throw Error("memcached_create failed");
  if (memcached_server_add(m.get(), "127.0.0.1", static_cast<in_port_t>(port)) != MEMCACHED_SUCCESS)
    throw Error("memcached_server_add: " + std::string(memcached_last_error_message(m.get())));
  memcached_behavior_set(m.get(), MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  return m;
}

// memcached's text protocol takes keys without spaces or control bytes: the 16 key bytes in
// hex (32 characters).
std::array<char, 2 * kv::kKeyBytes> text_key(std::uint64_t id) {
  static constexpr char kHex[] = "0123456789abcdef";
  const kv::Key k = kv::key_of(id);
  std::array<char, 2 * kv::kKeyBytes> t;
  for (std::size_t i = 0; i < k.size(); ++i) {
    t[2 * i] = kHex[std::to_integer<unsigned>(k[i]) >> 4];
    t[2 * i + 1] = kHex[std::to_integer<unsigned>(k[i]) & 15];
  }
  return t;
}

std::string failure(memcached_st* m, const char* what) {
  return std::string(what) + ": " + memcached_last_error_message(m);
}

// Loads key ids first, first + step, ... below `keys`: pipelined no-reply SETs (the caller
// then waits for memcached to hold them all).
void load(int port, const MemcachedParams& p, std::uint64_t first, std::uint64_t step) {
  Mc m = connect(port);
  memcached_behavior_set(m.get(), MEMCACHED_BEHAVIOR_NOREPLY, 1);
  memcached_behavior_set(m.get(), MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 1);
  std::vector<std::byte> value(p.value_size);
  for (std::uint64_t id = first; id < p.keys; id += step) {
    kv::fill_value(value, id, 0xfffffff0u, 0);
    const auto key = text_key(id);
    const memcached_return_t rc =
        memcached_set(m.get(), key.data(), key.size(), reinterpret_cast<const char*>(value.data()),
                      value.size(), 0, 0);
    if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_BUFFERED) throw Error(failure(m.get(), "load"));
  }
  if (memcached_flush_buffers(m.get()) != MEMCACHED_SUCCESS)
    throw Error(failure(m.get(), "load: flush"));
}

std::uint64_t items_held(int port) {
  Mc m = connect(port);
  memcached_return_t rc;
  memcached_stat_st* st = memcached_stat(m.get(), nullptr, &rc);
  if (!st || rc != MEMCACHED_SUCCESS) {
    memcached_stat_free(nullptr, st);
    throw Error(failure(m.get(), "stats"));
  }
  const std::uint64_t n = st->curr_items;
  memcached_stat_free(nullptr, st);
  return n;
}

struct ClientOut {
  std::vector<double> get_ns, put_ns;
  std::uint64_t misses = 0, bad_values = 0;
  double seconds = 0, cpu_s = 0;
  std::string error;
};

// Client c's warm-up and measured operations; `sync` (a std::barrier) marks the measured phase.
template <class Barrier>
void drive(int port, const MemcachedParams& p, unsigned c, const Clock& clock, Barrier& sync,
           ClientOut& out) {
  if (!p.cpus.empty()) pin_current_thread(p.cpus[c % p.cpus.size()]);
  try {
    Mc m = connect(port);
    kv::Workload load({p.keys, p.put_fraction, p.zipf, p.seed}, c);
    std::vector<std::byte> value(p.value_size);
    std::uint64_t version = 0;
    auto run = [&](std::uint64_t n, bool measure) {
      for (std::uint64_t i = 0; i < n; ++i) {
        const kv::Workload::Op op = load.next();
        const auto key = text_key(op.key);
        const std::uint64_t t0 = clock.now();
        memcached_return_t rc;
        if (op.kind == kv::OpKind::put) {
          kv::fill_value(value, op.key, c, ++version);
          rc = memcached_set(m.get(), key.data(), key.size(),
                             reinterpret_cast<const char*>(value.data()), value.size(), 0, 0);
          if (rc != MEMCACHED_SUCCESS) throw Error(failure(m.get(), "set"));
        } else {
          std::size_t len = 0;
          std::uint32_t flags = 0;
          char* got = memcached_get(m.get(), key.data(), key.size(), &len, &flags, &rc);
          std::unique_ptr<char, decltype(&std::free)> hold(got, std::free);
          if (rc == MEMCACHED_NOTFOUND) {
            ++out.misses;
          } else if (rc != MEMCACHED_SUCCESS) {
            throw Error(failure(m.get(), "get"));
          } else {
            auto tag = kv::check_value({reinterpret_cast<const std::byte*>(got), len});
            const bool verifiable = p.value_size >= kv::kMinValueBytes;
            if (len != p.value_size || (verifiable && (!tag || tag->key != op.key)))
              ++out.bad_values;
          }
        }
        if (measure)
          (op.kind == kv::OpKind::get ? out.get_ns : out.put_ns)
              .push_back(clock.to_ns(clock.now() - t0));
      }
    };
    run(p.warmup, false);
    sync.arrive_and_wait();
    const double c0 = thread_cpu_seconds();
    const std::uint64_t t0 = clock.now();
    run(p.requests, true);
    out.seconds = clock.to_ns(clock.now() - t0) / 1e9;
    out.cpu_s = thread_cpu_seconds() - c0;
    sync.arrive_and_wait();
  } catch (const std::exception& e) {
    out.error = e.what();
    // Leave the barriers to the others: a thread that failed drops out of what remains.
    sync.arrive_and_drop();
  }
}

}  // namespace

MemcachedResult run_memcached_reference(const MemcachedParams& p) {
  MemcachedResult r;
  r.clients = p.clients;
  r.server_threads = p.server_threads;
  const std::string& binary = p.binary;
  if (binary.empty()) {
    r.skipped = "'memcached' not found on PATH (Debian: apt-get install memcached)";
    return r;
  }
  r.version = version_of(binary);
  // Item memory: key, value and memcached's item header (~56 bytes) per key, with room for
  // the slab classes' rounding; -M makes running out an error instead of silent evictions.
  const std::uint64_t per_item = 2 * kv::kKeyBytes + p.value_size + 56;
  const std::uint64_t mb = 64 + p.keys * per_item * 3 / 2 / (1u << 20);
  std::unique_ptr<Server> server;
  int port = -1;
  for (int attempt = 0; attempt < 3 && !server; ++attempt) {
    port = free_port();
    if (port < 0) {
      r.skipped = std::string("no free loopback port: ") + std::strerror(errno);
      return r;
    }
    std::vector<std::string> argv = {binary,
                                     "-l",
                                     "127.0.0.1",
                                     "-p",
                                     std::to_string(port),
                                     "-U",
                                     "0",
                                     "-t",
                                     std::to_string(p.server_threads),
                                     "-m",
                                     std::to_string(mb),
                                     "-M",
                                     "-c",
                                     "4096"};
    if (::geteuid() == 0) argv.insert(argv.end(), {"-u", "root"});
    r.command.clear();
    for (const auto& a : argv) r.command += (r.command.empty() ? "" : " ") + a;
    auto s = std::make_unique<Server>(argv, port);
    if (s->error().empty())
      server = std::move(s);
    else
      r.skipped = s->error();
  }
  if (!server) return r;
  r.skipped.clear();

  const Clock clock;
  try {
    const auto l0 = std::chrono::steady_clock::now();
    const unsigned loaders = std::max(1u, p.clients);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(loaders);
    for (unsigned t = 0; t < loaders; ++t)
      threads.emplace_back([&, t] {
        try {
          load(port, p, t, loaders);
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (!e.empty()) throw Error(e);
    r.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
    // No-reply SETs are applied after the client sent them: wait until memcached holds every
    // key, or its count stops growing for a second (then something was refused).
    std::uint64_t held = 0, before = ~0ull;
    auto still = std::chrono::steady_clock::now();
    while ((held = items_held(port)) != p.keys) {
      if (held != before) still = std::chrono::steady_clock::now();
      before = held;
      if (held > p.keys || std::chrono::steady_clock::now() - still > 1s)
        throw Error("memcached holds " + std::to_string(held) + " of the " +
                    std::to_string(p.keys) + " keys loaded (item memory -m " + std::to_string(mb) +
                    " MB)");
      std::this_thread::sleep_for(2ms);
    }
  } catch (const std::exception& e) {
    r.skipped = std::string("loading failed: ") + e.what();
    return r;
  }

  std::vector<ClientOut> outs(p.clients);
  double server_cpu0 = 0, server_cpu1 = 0;
  int phase = 0;
  std::barrier sync(static_cast<std::ptrdiff_t>(p.clients), [&]() noexcept {
    (phase++ == 0 ? server_cpu0 : server_cpu1) = server->cpu_seconds();
  });
  {
    std::vector<std::thread> threads;
    for (unsigned c = 0; c < p.clients; ++c)
      threads.emplace_back([&, c] { drive(port, p, c, clock, sync, outs[c]); });
    for (auto& t : threads) t.join();
  }
  std::vector<double> get_ns, put_ns;
  double client_cpu = 0;
  for (const ClientOut& o : outs) {
    if (!o.error.empty()) {
      r.skipped = "memcached failed during the run: " + o.error;
      return r;
    }
    get_ns.insert(get_ns.end(), o.get_ns.begin(), o.get_ns.end());
    put_ns.insert(put_ns.end(), o.put_ns.begin(), o.put_ns.end());
    if (o.seconds > 0) r.requests_per_s += static_cast<double>(p.requests) / o.seconds;
    r.requests += p.requests;
    r.misses += o.misses;
    r.bad_values += o.bad_values;
    client_cpu += o.cpu_s;
  }
  r.gets = get_ns.size();
  r.puts = put_ns.size();
  r.get_latency_ns = summarize(get_ns);
  r.put_latency_ns = summarize(put_ns);
  if (r.requests) {
    r.cpu_ns_per_op.client = client_cpu * 1e9 / static_cast<double>(r.requests);
    r.cpu_ns_per_op.server = (server_cpu1 - server_cpu0) * 1e9 / static_cast<double>(r.requests);
  }
  return r;
}

#endif  // FABFLOW_HAVE_LIBMEMCACHED

}  // namespace fabflow::references
