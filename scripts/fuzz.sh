#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*.cc; clang, ASan + UBSan) in build-fuzz/ and runs them.
#   scripts/fuzz.sh                    every target, 20 s each
#   scripts/fuzz.sh TARGET [SECONDS]   one target (default 20 s)
#   scripts/fuzz.sh all SECONDS        every target, SECONDS each
#   scripts/fuzz.sh --list             the targets, one per line
# Each run starts from the committed seeds (fuzz/corpus/TARGET) and the inputs of past crashes
# (fuzz/regressions/TARGET, replayed first), keeps what it finds in build-fuzz/corpus/TARGET and
# writes a crashing input to build-fuzz/artifacts/. Exit 1 when any target crashed.
# FABFLOW_FUZZ_BUILD=DIR builds and works in DIR instead of build-fuzz (two runs side by side).
set -euo pipefail
cd "$(dirname "$0")/.."

targets=$(cd fuzz && ls *.cc | sed 's/\.cc$//')
if [ "${1:-}" = "--list" ]; then
  tr ' ' '\n' <<<"$targets"
  exit 0
fi
want=${1:-all}
seconds=${2:-20}
if [ "$want" != all ] && ! grep -qw -- "$want" <<<"$targets"; then
  echo "fuzz: unknown target '$want' (scripts/fuzz.sh --list)" >&2
  exit 2
fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "fuzz: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/setup.sh --deps installs it)" >&2
  exit 2
fi

bdir=${FABFLOW_FUZZ_BUILD:-build-fuzz}
CXX=clang++ cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFABFLOW_TESTS=OFF -DFABFLOW_FUZZ=ON >/dev/null
# The build's output goes to a log; a failed build says so and shows its errors (a quiet
# build that failed left the stage with an exit code and nothing to read).
if ! ninja -C "$bdir" fuzz_targets >"$bdir/build.log" 2>&1; then
  echo "fuzz: the fuzz targets did not build (log $bdir/build.log):" >&2
  grep -m10 -E 'error|FAILED|undefined reference' "$bdir/build.log" | sed 's/^/  /' >&2 || true
  exit 1
fi

# One target's run; its line of the summary goes to $bdir/$t.result.
run_one() {
  local t=$1 work=$bdir/corpus/$1 log=$bdir/$1.log dict=()
  mkdir -p "$work" "$bdir"/artifacts fuzz/regressions/"$t"
  [ -f fuzz/"$t".dict ] && dict=(-dict=fuzz/"$t".dict)
  if "$bdir"/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$bdir"/artifacts/"$t"- "${dict[@]}" \
      "$work" fuzz/corpus/"$t" fuzz/regressions/"$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    printf 'fuzz: %-16s ok     %4s s  %10s runs  %7s exec/s  corpus %s\n' "$t" "$seconds" \
      "$runs" "$rate" "$(ls "$work" | wc -l)" >"$bdir/$t.result"
  else
    { printf 'fuzz: %-16s FAILED (log %s)\n' "$t" "$log"
      grep -m3 -E 'ERROR|what\(\)|runtime error' "$log" | sed 's/^/  /' || true; } >"$bdir/$t.result"
  fi
}

# Each fuzzer is one process on one core: as many run at once as there are cores
# (FABFLOW_FUZZ_JOBS changes it); the summary keeps the targets' order.
jobs_max=${FABFLOW_FUZZ_JOBS:-$(nproc)}
chosen=()
for t in $targets; do
  [ "$want" = all ] || [ "$want" = "$t" ] || continue
  chosen+=("$t")
  rm -f "$bdir/$t.result"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  run_one "$t" &
done
wait
failed=()
for t in "${chosen[@]}"; do
  if [ -f "$bdir/$t.result" ]; then cat "$bdir/$t.result"; else echo "fuzz: $t left no result"; fi
  grep -q '^fuzz: [^ ]* *ok ' "$bdir/$t.result" 2>/dev/null || failed+=("$t")
done
((${#failed[@]} == 0)) || { echo "fuzz: crashed: ${failed[*]}"; exit 1; }
