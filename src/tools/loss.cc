#include "tools/loss.h"

#include <fabflow/status.h>

#include <chrono>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <vector>

#include "bench/report.h"
#include "tools/subprocess.h"

namespace fabflow::tools {

std::string install_loss(double p) {
  const std::string percent = report::fmt("%g", p * 100) + "%";
  auto run = [](std::vector<std::string> argv) {
    ChildOptions o;
    o.argv = std::move(argv);
    o.capture_stderr = true;
    o.timeout = std::chrono::seconds(10);
    ChildResult r = run_child(o, [](const std::string&) {});
    while (!r.err.empty() && r.err.back() == '\n') r.err.pop_back();
    return r;
  };
  if (const std::string tc = find_binary("tc", "/usr/sbin:/sbin"); !tc.empty()) {
    if (run({tc, "qdisc", "add", "dev", "eth0", "root", "netem", "loss", percent}).status == 0)
      return "netem loss " + percent + " on eth0's egress in each rank's namespace";
  }
  const std::string iptables = find_binary("iptables", "/usr/sbin:/sbin");
  if (iptables.empty())
    throw UsageError(
        "--loss: this kernel has no netem and iptables is not installed "
        "(apt install iptables)");
  const ChildResult r = run({iptables, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode",
                             "random", "--probability", report::fmt("%.6f", p), "-j", "DROP"});
  if (r.status != 0)
    throw UsageError("--loss: iptables refused the rule: " + r.err.substr(0, r.err.find('\n')));
  return "iptables statistic match dropping " + percent +
         " of the packets arriving on eth0 in each rank's namespace (no netem here)";
}

bool loss_tool_installed() {
  return !find_binary("iptables", "/usr/sbin:/sbin").empty() ||
         !find_binary("tc", "/usr/sbin:/sbin").empty();
}

void install_rto_min(unsigned ms) {
  auto run = [](std::vector<std::string> argv) {
    ChildOptions o;
    o.argv = std::move(argv);
    o.capture_stderr = true;
    o.timeout = std::chrono::seconds(10);
    std::string out;
    ChildResult r = run_child(o, [&](const std::string& text) { out += text + "\n"; });
    while (!r.err.empty() && r.err.back() == '\n') r.err.pop_back();
    return std::pair{r, out};
  };
  const std::string ip = find_binary("ip", "/usr/sbin:/sbin:/usr/bin:/bin");
  if (ip.empty()) throw UsageError("--rto-min: ip (iproute2) is not installed");
  const auto [shown, routes] = run({ip, "-o", "-4", "route", "show", "dev", "eth0"});
  if (shown.status != 0) throw UsageError("--rto-min: ip route show failed: " + shown.err);
  std::istringstream lines(routes);
  std::string line;
  int changed = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (w.empty()) continue;
    // The route's own keys kept; flags the kernel prints (linkdown, ...) are not arguments.
    std::vector<std::string> argv = {ip, "route", "change", w[0], "dev", "eth0"};
    for (std::size_t i = 1; i + 1 < w.size(); ++i)
      if (w[i] == "proto" || w[i] == "scope" || w[i] == "src" || w[i] == "metric") {
        argv.push_back(w[i]);
        argv.push_back(w[++i]);
      }
    argv.insert(argv.end(), {"rto_min", std::to_string(ms) + "ms"});
    const ChildResult r = run(argv).first;
    if (r.status != 0) throw UsageError("--rto-min: ip refused the route change: " + r.err);
    ++changed;
  }
  if (changed == 0) throw UsageError("--rto-min: no IPv4 route on eth0 in the rank's namespace");
}

}  // namespace fabflow::tools
