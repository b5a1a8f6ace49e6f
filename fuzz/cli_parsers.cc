// Fuzz target: the parsers of what a user types: size lists and sweeps (-S), host:port
// (FABFLOW_COORD, --coordinator), flow design names and every enumerated name table; and the
// PMI2 process mapping a launcher hands over.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fabflow/bench/common.h>
#include <fabflow/flow.h>
#include <fabflow/kv.h>
#include <fabflow/names.h>
#include <fabflow/rr.h>
#include <fabflow/seq.h>
#include <fabflow/status.h>
#include <fabflow/transport.h>

#include "bootstrap/job_store.h"
#include "bootstrap/net.h"

namespace {

template <class E>
void names(std::string_view s) {
  if (auto v = fabflow::parse_name<E>(s)) {
    // A parsed name prints back as a name the parser accepts again.
    if (fabflow::parse_name<E>(fabflow::name_of(*v)) != v) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (std::size_t v : fabflow::parse_sizes(text))
      if (v == 0 && text.find('0') == std::string::npos) __builtin_trap();
  } catch (const fabflow::UsageError&) {
  }
  std::string why;
  if (auto hp = fabflow::bootstrap_detail::parse_host_port(text, &why); !hp && why.empty())
    __builtin_trap();  // a refusal says why
  if (auto d = fabflow::flow::Design::parse(text))
    if (!d->valid() || fabflow::flow::Design::parse(d->name()) != d) __builtin_trap();
  names<fabflow::Op>(text);
  names<fabflow::EndpointType>(text);
  names<fabflow::ProgressMode>(text);
  names<fabflow::rr::Pattern>(text);
  names<fabflow::rr::Mailbox>(text);
  names<fabflow::rr::Model>(text);
  names<fabflow::rr::Topology>(text);
  (void)fabflow::seq::parse_design(text);
  (void)fabflow::kv::parse_design(text);
  if (auto n = fabflow::bootstrap_detail::nodes_in_process_mapping(text); n && *n == 0)
    __builtin_trap();  // a job has at least one node
  return 0;
}
