// Fuzz target: an experiment catalogue file (experiments/*.json), as `fabflow experiment`
// reads it: parsed, validated, and each entry's quick form derived.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string_view>

#include <fabflow/bench/experiment.h>
#include <fabflow/status.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto c = fabflow::bench::parse_catalogue(text, "fuzz.json");
    for (const auto& e : c.entries) {
      for (bool quick : {true, false}) {
        for (unsigned cores : {1u, 2u, 64u}) {
          (void)fabflow::bench::effective(e, quick, cores);
          (void)fabflow::bench::entry_json(e, quick, cores).dump();
          // A catalogue can ask for a huge cartesian product; expand it only when small.
          std::size_t points = 1;
          for (const auto& v : fabflow::bench::effective(e, quick, cores).sweep)
            points *= std::max<std::size_t>(v.values.size(), 1);
          if (points <= 4096) (void)fabflow::bench::expand(e, quick, cores);
        }
      }
    }
  } catch (const fabflow::UsageError&) {
  }
  return 0;
}
