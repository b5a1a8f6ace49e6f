// flow_pipeline: a two-process pipeline over a flow queue.
//
// Rank 0 (the producer) reads a text file and enqueues it line by line, one item per line;
// rank 1 (the consumer) dequeues the lines in order and counts lines, words and bytes. Both
// sides checksum what they moved, so the output shows the stream arrived intact. The design
// point (how bytes and notifications travel, see docs/flow-queues.md) and the transport are
// flags. Without --design (or with --design auto) the queue chooses its design itself: the
// best one `fabflow advise queue -S 4K` measured on this machine, else the default rule; the
// producer prints which and why.
//
// Run it from a shell; it starts its two ranks itself with fabflow's launcher:
//   flow_pipeline [--design auto|push1-watermark-pull|...] [-p local|shm|tcp|verbs|...] FILE
// On a cluster, start one process per rank instead (srun -n 2, mpirun -np 2) with
// FABFLOW_COORD set as docs/bootstrap.md explains.
#include <fabflow/bootstrap.h>
#include <fabflow/flow.h>
#include <fabflow/launcher.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::size_t kMaxLine = 4096;  // longer lines travel as several items
constexpr std::chrono::seconds kTimeout{10};

// FNV-1a over the bytes of every item, in order.
struct Checksum {
  std::uint64_t value = 14695981039346656037ull;
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) value = (value ^ c) * 1099511628211ull;
  }
};

int produce(fabflow::flow::Producer& queue, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "flow_pipeline: cannot read " << path << "\n";
    return 1;
  }
  Checksum sum;
  std::uint64_t items = 0;
  for (std::string line; std::getline(in, line);) {
    for (std::size_t at = 0; at == 0 || at < line.size(); at += kMaxLine) {
      std::string_view piece = std::string_view(line).substr(at, kMaxLine);
      if (queue.enqueue(std::as_bytes(std::span(piece)), kTimeout) != fabflow::Status::ok) {
        std::cerr << "flow_pipeline: enqueue failed: " << queue.error() << "\n";
        return 1;
      }
      sum.add(piece);
      ++items;
    }
  }
  if (queue.close(kTimeout) != fabflow::Status::ok) {
    std::cerr << "flow_pipeline: close failed: " << queue.error() << "\n";
    return 1;
  }
  std::printf("producer: %llu items, checksum %016llx\n", static_cast<unsigned long long>(items),
              static_cast<unsigned long long>(sum.value));
  return 0;
}

int consume(fabflow::flow::Consumer& queue) {
  std::vector<std::byte> buffer(kMaxLine);
  Checksum sum;
  std::uint64_t items = 0, words = 0, bytes = 0;
  for (;;) {
    std::size_t len = 0;
    fabflow::Status s = queue.dequeue(buffer, &len, kTimeout);
    if (s == fabflow::Status::closed) break;
    if (s != fabflow::Status::ok) {
      std::cerr << "flow_pipeline: dequeue failed: " << queue.error() << "\n";
      return 1;
    }
    std::string_view line(reinterpret_cast<const char*>(buffer.data()), len);
    bool in_word = false;
    for (char c : line) {
      bool space = c == ' ' || c == '\t';
      words += !space && !in_word;
      in_word = !space;
    }
    sum.add(line);
    bytes += len;
    ++items;
  }
  std::printf("consumer: %llu items, %llu words, %llu bytes, checksum %016llx\n",
              static_cast<unsigned long long>(items), static_cast<unsigned long long>(words),
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(sum.value));
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string design_name = "auto", provider = "auto", path;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if ((arg == "--design" || arg == "-p") && i + 1 < argc) {
      (arg == "-p" ? provider : design_name) = argv[++i];
    } else if (path.empty() && !arg.starts_with("-")) {
      path = argv[i];
    } else {
      std::cerr << "usage: flow_pipeline [--design D] [-p PROVIDER] FILE\n";
      return 2;
    }
  }
  auto design = fabflow::flow::Design::parse(design_name);
  if (path.empty() || (!design && design_name != "auto")) {
    std::cerr << "usage: flow_pipeline [--design D] [-p PROVIDER] FILE (D: auto, the "
                 "default, or a design as in `fabflow bench queue --help`)\n";
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
  fabflow::flow::QueueOptions options;
  options.automatic = !design;
  if (design) options.design = *design;
  options.item_bytes = kMaxLine;
  fabflow::TransportOptions transport_options;
  transport_options.provider = provider;
  transport_options.ops = fabflow::flow::required_ops(options);
  // push2 designs keep a receive posted per ring slot: a receive queue that holds them.
  transport_options.rx_depth =
      std::max(transport_options.rx_depth, fabflow::flow::required_rx_depth(options));
  // "auto" finds out whether both ranks share this host (then: local) and says what it chose.
  std::string choice;
  auto transport = fabflow::connect_transport(transport_options, *boot, &choice);
  if (boot->rank() == 0) std::printf("transport: %s\n", choice.c_str());

  int status = 0;
  if (boot->rank() == 0) {
    auto producer = fabflow::flow::make_producer(*transport, *boot, 1, options);
    if (!producer->why().empty()) std::printf("design: %s\n", producer->why().c_str());
    status = produce(*producer, path);
  } else {
    auto consumer = fabflow::flow::make_consumer(*transport, *boot, 0, options);
    status = consume(*consumer);
  }
  // Neither side leaves (and tears down its memory) while the other may still reach it; a
  // failed side tells the other at once instead.
  if (status != 0)
    boot->abort("flow_pipeline failed on rank " + std::to_string(boot->rank()));
  else
    boot->barrier([&] { transport->progress(); });
  return status;
} catch (const std::exception& e) {
  std::cerr << "flow_pipeline: " << e.what() << "\n";
  return 1;
}
