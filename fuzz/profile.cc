// Fuzz target: a provider profile file (profiles/*.json, or one a user passes to --profile), as
// load_profile reads it: parsed and validated, then applied to a transport's capabilities.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fabflow/local.h>
#include <fabflow/profile.h>
#include <fabflow/status.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = fabflow::parse_profile(text, "fuzz.json");
    const fabflow::Capabilities held = fabflow::apply_profile(fabflow::local_capabilities(), p);
    const fabflow::Op ops[] = {fabflow::Op::send, fabflow::Op::writedata, fabflow::Op::fadd};
    (void)fabflow::profile_refusal(held, p, ops);
  } catch (const fabflow::UsageError&) {
  }
  return 0;
}
