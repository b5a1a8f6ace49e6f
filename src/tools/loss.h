// Packet loss inside a rank's own network namespace, for `fabflow bench lat --loss`.
#pragma once

#include <string>

namespace fabflow::tools {

// Drops the share `p` (0 < p < 1) of packets in this rank's own network namespace (both ranks
// do, so each packet meets one drop point): netem on eth0's egress where the kernel has it, else
// an iptables statistic rule on eth0's input. Returns what was installed; throws UsageError with
// the tool's refusal.
std::string install_loss(double p);

// Sets TCP's minimum retransmission timeout on every IPv4 route of eth0 in this rank's own
// namespace (`ip route change ... rto_min MSms`, locked: the kernel then uses it as the RTO's
// floor instead of its 200 ms). Throws UsageError with ip's refusal.
void install_rto_min(unsigned ms);

// Whether tc (netem) or iptables is installed, so that install_loss can try.
bool loss_tool_installed();

}  // namespace fabflow::tools
