// auto: which design a queue end opens when its options name none (flow.h, choose_design;
// docs/advise.md, "auto").
#include <fabflow/advice.h>
#include <fabflow/flow.h>

#include <algorithm>

namespace fabflow::flow {

AutoDesign choose_design(const Capabilities& data, const Capabilities& notify,
                         const QueueOptions& options) {
  const advice::Query q{
      "queue", data.provider, options.item_bytes, {options.objective}, options.profile};
  std::vector<std::string> rule{"push1-watermark-pull"};
  for (const Design& d : Design::all())
    if (std::find(rule.begin(), rule.end(), d.name()) == rule.end()) rule.push_back(d.name());
  auto allowed = [&](const std::string& name) -> std::string {
    QueueOptions o = options;
    o.automatic = false;
    o.socket = name == "socket";
    if (o.socket)
      return o.separate_notify_endpoint ? "the socket baseline has no notify endpoint" : "";
    const auto d = Design::parse(name);
    if (!d) return "not a design point of this fabflow";
    o.design = *d;
    return why_unsupported(data, notify, o);
  };
  const advice::Choice c = advice::choose(
      advice::read_profile(q), rule,
      "push1-watermark-pull, the thesis' Design #1, else the first design point the transport "
      "runs",
      allowed);
  return {c.design, c.why};
}

}  // namespace fabflow::flow
