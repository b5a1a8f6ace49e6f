// kv_cache: a key-value cache of sensor readings in fabflow's key-value store.
//
// Rank 1 is the server: it holds the table and loads one reading per sensor before serving.
// Rank 0 is the client: it reads every sensor, stores a new reading for each, reads them back
// and checks them, deletes one sensor and checks that it is gone. Keys are 16 bytes and values
// a fixed 32 bytes, as the store takes them. The design says how operations travel (every
// operation an RPC, GETs as one-sided READs, or PUTs locked with atomics; docs/kv.md). Without
// --design (or with --design auto) the store chooses it itself: the best one `fabflow advise
// kv` measured on this machine, else the default rule; the client prints which and why.
//
// Run it from a shell; it starts its two ranks itself with fabflow's launcher:
//   kv_cache [--design auto|herd|read|atomic] [-p PROVIDER] [-n SENSORS]
// On a cluster, start one process per rank instead (srun -n 2, mpirun -np 2) with
// FABFLOW_COORD set as docs/bootstrap.md explains.
#include <fabflow/bootstrap.h>
#include <fabflow/kv.h>
#include <fabflow/launcher.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace kv = fabflow::kv;
constexpr std::size_t kValueBytes = 32;

// "sensor-17" as a 16-byte key, zero-padded.
kv::Key sensor_key(long i) {
  kv::Key key{};
  const std::string name = "sensor-" + std::to_string(i);
  std::memcpy(key.data(), name.data(), std::min(name.size(), key.size()));
  return key;
}

std::vector<std::byte> reading(long sensor, int round) {
  std::vector<std::byte> value(kValueBytes);
  const std::string text =
      "t=" + std::to_string(20 + sensor % 10) + "." + std::to_string(round) + "C";
  std::memcpy(value.data(), text.data(), std::min(text.size(), value.size()));
  return value;
}

int client(kv::Client& store, fabflow::Bootstrap& boot, long sensors) {
  store.cache_index(boot);  // atomic design: learn where each item lives; others: nothing
  std::vector<std::byte> got;
  for (long i = 0; i < sensors; ++i)
    if (store.get(boot, sensor_key(i), &got) != kv::Code::ok || got != reading(i, 0)) {
      std::cerr << "kv_cache: sensor " << i << " does not hold its loaded reading\n";
      return 1;
    }
  for (long i = 0; i < sensors; ++i)
    if (store.put(boot, sensor_key(i), reading(i, 1)) != kv::Code::ok) {
      std::cerr << "kv_cache: storing sensor " << i << " failed\n";
      return 1;
    }
  for (long i = 0; i < sensors; ++i)
    if (store.get(boot, sensor_key(i), &got) != kv::Code::ok || got != reading(i, 1)) {
      std::cerr << "kv_cache: sensor " << i << " does not hold its new reading\n";
      return 1;
    }
  if (store.del(boot, sensor_key(0)) != kv::Code::ok ||
      store.get(boot, sensor_key(0), &got) != kv::Code::not_found) {
    std::cerr << "kv_cache: sensor 0 was not deleted\n";
    return 1;
  }
  std::printf("client: %ld sensors read, updated and checked; sensor-0 deleted\n", sensors);
  store.close(boot);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string design_name = "auto", provider = "auto";
  long sensors = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view flag = argv[i];
    if (flag == "--design")
      design_name = argv[i + 1];
    else if (flag == "-p")
      provider = argv[i + 1];
    else if (flag == "-n")
      sensors = std::atol(argv[i + 1]);
    else
      sensors = -1;
  }
  auto design = kv::parse_design(design_name);
  if ((!design && design_name != "auto") || sensors < 1 || sensors > 100000 || argc % 2 == 0) {
    std::cerr << "usage: kv_cache [--design auto|herd|read|atomic] [-p PROVIDER] [-n 1..100000]\n";
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
  kv::Options options;
  options.automatic = !design;
  if (design) options.design = *design;
  options.value_bytes = kValueBytes;
  options.capacity = static_cast<std::uint64_t>(sensors) * 2;
  fabflow::TransportOptions transport_options;
  transport_options.provider = provider;
  // "auto": the store finds out whether the ranks share this host (then: local).

  // Rank 0 is the client, rank 1 the one server (setup is collective).
  int status = 0;
  if (boot->rank() == 0) {
    auto store = kv::make_client(transport_options, *boot, /*servers=*/1, options);
    if (!store->why().empty()) std::printf("design: %s\n", store->why().c_str());
    boot->barrier();  // the server has loaded its readings
    status = client(*store, *boot, sensors);
  } else {
    auto store = kv::make_server(transport_options, *boot, /*servers=*/1, options);
    for (long i = 0; i < sensors; ++i) store->load(sensor_key(i), reading(i, 0));
    boot->barrier();
    const kv::ServerStats stats = store->run();  // until the client closed
    std::printf("server: %llu requests served, %llu sensors held\n",
                static_cast<unsigned long long>(stats.served),
                static_cast<unsigned long long>(stats.items));
  }
  if (status != 0) boot->abort("kv_cache failed on rank " + std::to_string(boot->rank()));
  return status;
} catch (const std::exception& e) {
  std::cerr << "kv_cache: " << e.what() << "\n";
  return 1;
}
