// rpc_echo: an RPC echo server and client over a request-response channel.
//
// Rank 0 is the client: it sends N requests ("request <i>") one at a time and checks that each
// response is its request with the letters upper-cased. Rank 1 is the server: its handler
// builds that response. The client prints how many round trips it made and their mean time.
// The pattern says how each direction travels (WRITE into a mailbox or SEND, see
// docs/request-response.md). Without --pattern (or with --pattern auto) the channel chooses it
// itself: the best one `fabflow advise rr -S 64` measured on this machine, else the default
// rule; the client prints which and why.
//
// Run it from a shell; it starts its two ranks itself with fabflow's launcher:
//   rpc_echo [--pattern auto|WriteWrite|SendSend|WriteSend|SendWrite] [-p PROVIDER] [-n N]
// On a cluster, start one process per rank instead (srun -n 2, mpirun -np 2) with
// FABFLOW_COORD set as docs/bootstrap.md explains.
#include <fabflow/bootstrap.h>
#include <fabflow/launcher.h>
#include <fabflow/rr.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>

namespace {

std::size_t upper_case(int, std::span<const std::byte> request, std::span<std::byte> response) {
  std::size_t n = std::min(request.size(), response.size());
  for (std::size_t i = 0; i < n; ++i)
    response[i] = std::byte(std::toupper(static_cast<unsigned char>(request[i])));
  return n;
}

int client(fabflow::rr::Requester& channel, fabflow::Bootstrap& boot, long requests) {
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < requests; ++i) {
    std::string text = "request " + std::to_string(i) + " from the echo client";
    std::memcpy(channel.request_buffer(0).data(), text.data(), text.size());
    fabflow::rr::Response response;
    channel.call(/*slot=*/0, /*responder=*/0, text.size(), &response, boot);
    std::string_view answer(reinterpret_cast<const char*>(response.data.data()),
                            response.data.size());
    std::string expected = text;
    for (char& c : expected) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    bool good = answer == expected;
    channel.release(response);
    if (!good) {
      std::cerr << "rpc_echo: response " << i << " is '" << answer << "'\n";
      return 1;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (channel.close() != fabflow::Status::ok) {
    std::cerr << "rpc_echo: close failed: " << channel.error() << "\n";
    return 1;
  }
  std::printf("client: %ld echoes checked, mean round trip %.2f us\n", requests,
              requests ? seconds * 1e6 / static_cast<double>(requests) : 0.0);
  return 0;
}

int server(fabflow::rr::Responder& channel, fabflow::Bootstrap& boot) {
  const fabflow::rr::Handler handler = upper_case;
  unsigned long served = 0, idle = 0;
  while (!channel.done()) {
    unsigned n = 0;
    fabflow::Status s = channel.serve(&handler, &n);
    if (s == fabflow::Status::failed) {
      std::cerr << "rpc_echo: serve failed: " << channel.error() << "\n";
      return 1;
    }
    served += n;
    // A client that vanished never closes: ask the bootstrap now and then.
    if (s == fabflow::Status::empty && ++idle % 4096 == 0 && boot.peer_failed()) {
      std::cerr << "rpc_echo: the client went away\n";
      return 1;
    }
  }
  std::printf("server: %lu requests served\n", served);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string pattern_name = "auto", provider = "auto";
  long requests = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view flag = argv[i];
    if (flag == "--pattern")
      pattern_name = argv[i + 1];
    else if (flag == "-p")
      provider = argv[i + 1];
    else if (flag == "-n")
      requests = std::atol(argv[i + 1]);
    else
      requests = -1;
  }
  auto pattern = fabflow::rr::parse_pattern(pattern_name);
  if ((!pattern && pattern_name != "auto") || requests < 0 || argc % 2 == 0) {
    std::cerr << "usage: rpc_echo [--pattern auto|WriteWrite|SendSend|WriteSend|SendWrite] "
                 "[-p PROVIDER] [-n REQUESTS]\n";
    return 2;
  }
  // From a shell: become the launcher of two copies of this program, one per rank.
  if (!fabflow::started_by_launcher()) {
    fabflow::LaunchConfig launch;
    launch.argv.assign(argv, argv + argc);
    launch.argv[0] = "/proc/self/exe";
    return fabflow::launch_local(launch);
  }

  fabflow::BootstrapConfig config;
  config.fill_from_env();
  auto boot = fabflow::make_tcp_bootstrap(config);
  fabflow::rr::ChannelOptions options;
  options.automatic = !pattern;
  if (pattern) options.pattern = *pattern;
  fabflow::TransportOptions transport_options;
  transport_options.provider = provider;
  transport_options.ops = fabflow::rr::required_ops(options);
  // "auto" finds out whether both ranks share this host (then: local) and says what it chose.
  std::string choice;
  auto transport = fabflow::connect_transport(transport_options, *boot, &choice);
  if (boot->rank() == 0) std::printf("transport: %s\n", choice.c_str());

  // Ranks [0, 1) request, rank 1 responds.
  int status = 0;
  if (boot->rank() == 0) {
    auto channel = fabflow::rr::make_requester(*transport, *boot, options, 1, /*slots=*/1);
    if (!channel->why().empty()) std::printf("pattern: %s\n", channel->why().c_str());
    status = client(*channel, *boot, requests);
  } else {
    auto channel = fabflow::rr::make_responder(*transport, *boot, options, 1);
    status = server(*channel, *boot);
  }
  if (status != 0)
    boot->abort("rpc_echo failed on rank " + std::to_string(boot->rank()));
  else
    boot->barrier([&] { transport->progress(); });
  return status;
} catch (const std::exception& e) {
  std::cerr << "rpc_echo: " << e.what() << "\n";
  return 1;
}
