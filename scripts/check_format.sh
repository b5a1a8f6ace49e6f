#!/usr/bin/env bash
# Fails when a C++ file under version control is not laid out as .clang-format says, naming
# each such file and the command that fixes it. clang-format comes from Debian (setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed" >&2; exit 1; }
bad=()
while IFS= read -r -d '' f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files -z '*.cc' '*.h')
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: $(git ls-files '*.cc' '*.h' | wc -l) files formatted"
# The experiment catalogue's layout (scripts/format_catalogue.py writes it).
python3 scripts/format_catalogue.py --check
