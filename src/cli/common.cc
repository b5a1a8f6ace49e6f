// Pieces shared by the `bench` subcommands: the flags' target and providers, the bulk families'
// buffer flags, and the flags turned into the rank and launch requests of tools/ranks.h.
#include <fabflow/profile.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include <algorithm>
#include <sstream>

#include "cli/bench_shell.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tools/ranks.h"

namespace fabflow::cli {

void add_common_flags(CLI::App& app, CommonFlags& f, const std::string& size_help,
                      const std::string& progress_help) {
  app.add_option("-p,--provider", f.providers,
                 "provider(s), comma-separated (local, tcp, shm, verbs, ...; auto)")
      ->check([](const std::string& v) -> std::string {
        const auto names = split(v, ',');
        if (v.empty() || names.empty()) return "-p needs a provider";
        if (v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
          return "-p '" + v + "' has an empty provider name";
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (names[i].empty()) return "-p '" + v + "' has an empty provider name";
          for (std::size_t j = 0; j < i; ++j)
            if (names[i] == names[j]) return "-p names '" + names[i] + "' twice";
        }
        return "";
      });
  add_choice<EndpointType>(app, "-e,--endpoint", f.endpoint, "endpoint type");
  app.add_option("-S,--size", f.sizes, size_help)->check([](const std::string& v) -> std::string {
    return v.empty() ? "-S needs a size (e.g. 64, 64,4K or 4:64K)" : "";
  });
  add_choice<ProgressMode>(app, "--progress", f.progress, progress_help);
  app.add_flag("--json", f.json, "one JSON object per result line");
  app.add_flag("--no-pin", f.no_pin, "do not pin ranks to CPUs");
  app.add_flag("--netns", f.netns, "run each rank in its own network namespace (root)");
  add_number<std::uint64_t>(app, "--timeout", f.timeout_ms, 100, 3600000,
                            "fail after this many ms without progress, or once a rank shows no "
                            "sign of life (stopped, hung) for this long (that bound is never "
                            "below 1000 ms)");
  // The secret is read from a file or FABFLOW_SECRET, never taken from argv, where `ps` shows
  // it to every user of the host. Checked here, so that a bad file is one line before launch.
  app.add_option("--secret-file", f.secret_file,
                 "file holding the bootstrap secret (mode 0600 or stricter; default: "
                 "FABFLOW_SECRET, FABFLOW_SECRET_FILE)")
      ->check([](const std::string& path) -> std::string {
        try {
          BootstrapConfig::read_secret_file(path);
          return "";
        } catch (const UsageError& e) {
          return e.what();
        }
      });
  app.add_option("--profile", f.profile,
                 "hold the transports to a hardware provider's envelope (verbs, efa, cxi, ...: "
                 "`fabflow info --profile NAME`; or a profile file)")
      ->check([](const std::string& name) -> std::string {
        try {
          load_profile(name);
          return "";
        } catch (const UsageError& e) {
          return e.what();
        }
      });
  app.add_option("--launched-provider", f.launched_provider)->group("");
}

namespace {
// The one provider a launched rank runs, else -p's list.
std::vector<std::string> named_providers(const CommonFlags& f) {
  return split(f.launched_provider.empty() ? f.providers : f.launched_provider, ',');
}
}  // namespace

std::vector<std::string> providers_to_run(const CommonFlags& f) {
  auto providers = named_providers(f);
  if (providers.empty()) throw UsageError("no provider given");
  return providers;
}

bench::Target flags_target(const CommonFlags& f) {
  bench::Target t;
  const auto providers = named_providers(f);
  if (!providers.empty()) t.provider = providers.front();
  t.endpoint = parse_name<EndpointType>(f.endpoint).value();  // checked by the parser
  t.timeout_ms = f.timeout_ms;
  t.profile = f.profile;
  return t;
}

void add_buffer_flags(CLI::App& app, std::uint64_t& reuse, bool& mr_pin, const std::string& unit) {
  add_number<std::uint64_t>(app, "--reuse", reuse, 0, kMaxCount,
                            unit +
                                " a buffer serves before a freshly mapped one replaces it "
                                "(1: no reuse; 0: never replaced)");
  app.add_flag("--mr-pin", mr_pin,
               "pin the pages of every registration (mlock), as verbs registration does");
}

void check_buffer_sizes(const std::vector<std::size_t>& sizes) {
  for (std::size_t s : sizes)
    if (s > (std::size_t{1} << 30))
      throw UsageError("-S: size " + std::to_string(s) + " is above 1 GiB");
}

std::size_t bytes_per_point(const std::string& text) {
  const std::size_t bytes = parse_one_size("--bytes", text);
  if (bytes == 0) throw UsageError("--bytes must be above 0");
  return bytes;
}

TransportOptions provider_options(const std::string& provider, EndpointType endpoint,
                                  std::vector<Op> ops) {
  TransportOptions o;
  o.provider = provider;
  o.endpoint = endpoint;
  o.ops = std::move(ops);
  return o;
}

int run_rank(const CommonFlags& flags, const std::function<void(Rank&)>& body,
             std::chrono::milliseconds min_timeout) {
  tools::RankRequest r;
  r.target = flags_target(flags);
  r.pin = !flags.no_pin;
  r.secret_file = flags.secret_file;
  r.min_timeout = min_timeout;
  r.silence = silence_bound(flags);
  return tools::run_rank(r, body);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// At least a second: a heartbeat thread held off the CPU by busy-polling ranks for a moment is
// not a stuck rank.
std::chrono::milliseconds silence_bound(const CommonFlags& f) {
  return std::max(std::chrono::milliseconds(f.timeout_ms), std::chrono::milliseconds(1000));
}

LaunchConfig self_launch(const Invocation& self, const CommonFlags& f,
                         std::vector<std::string> extra) {
  return tools::self_launch(self.argv, f.netns, silence_bound(f), extra);
}

int launch_each_provider(const Invocation& self, const CommonFlags& f,
                         const std::vector<std::string>& providers, EndpointType endpoint,
                         const std::function<void(LaunchConfig&)>& prepare) {
  tools::ProviderLaunches l;
  l.providers = providers;
  l.endpoint = endpoint;
  l.netns = f.netns;
  l.blank_between = !f.json;
  l.launch = [&](const std::string& provider) {
    LaunchConfig lc = self_launch(self, f, {"--launched-provider", provider});
    if (prepare) prepare(lc);
    return lc;
  };
  return tools::launch_each_provider(l);
}

}  // namespace fabflow::cli
