#!/usr/bin/env bash
# The fault campaign: for DURATION, runs of `fabflow bench` (queue, rr, kv, seq, bulk on local,
# shm and tcp, on loopback) whose ranks are randomly stopped for a while and continued, stopped
# for good, or killed, at a random moment. Every run must either complete verified (exit 0: the
# bench checked FIFO order, exactly-once delivery, payload sums, the key-value history) or fail
# within its timeout plus a margin with one error line; afterwards none of its processes and
# none of its shared-memory regions may be left. Prints one line per run and a summary; exits 1
# at the first violation, naming the command.
#   scripts/chaos.sh 10m                  the campaign of docs/launcher.md
#   scripts/chaos.sh 60s local,shm        a slice (the test command runs one)
#   FABFLOW=path/to/fabflow CHAOS_SEED=7 scripts/chaos.sh 90s
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-60s}
providers=${2:-local,shm,tcp}
fabflow=${FABFLOW:-build/fabflow}
seed=${CHAOS_SEED:-$$}
RANDOM=$seed
case $duration in
  *m) seconds=$((${duration%m} * 60)) ;;
  *s) seconds=${duration%s} ;;
  *) seconds=$duration ;;
esac
[[ $seconds =~ ^[0-9]+$ ]] || { echo "chaos: bad duration '$duration' (e.g. 90s, 10m)" >&2; exit 2; }
[ -x "$fabflow" ] || { echo "chaos: $fabflow is not built" >&2; exit 2; }
IFS=, read -r -a provider_list <<< "$providers"

timeout_ms=1000   # --timeout: the peer timeout and the silence bound
margin=3          # seconds past the timeout a failing run may take (the promise is 1 s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A workload per family that runs for a few seconds, so that a fault lands mid-run.
workload() {
  case $1 in
    queue) echo "queue --design push1-watermark-pull --items 1000000" ;;
    rr) echo "rr -I 100000" ;;
    kv) echo "kv --design all --keys 20000 -I 60000 --clients 2 --put-fraction 0.5 --zipf 0.99" ;;
    seq) echo "seq --design rpc,spec -I 600000" ;;
    bulk) echo "bulk --protocol rndv-write,pipeline -S 1M --bytes 1G" ;;
  esac
}

now() { date +%s.%N; }
violation() {
  echo "chaos: VIOLATION: $*" >&2
  echo "chaos: command: $cmd" >&2
  echo "chaos: stderr:" >&2
  sed 's/^/  /' "$work/err" >&2
  exit 1
}

families=(queue rr kv seq bulk)
faults=(none pause stop kill)
runs=0
declare -A outcome
end=$(($(date +%s) + seconds))
echo "chaos: ${seconds} s on ${providers}, seed ${seed}, --timeout ${timeout_ms} ms"
while [ "$(date +%s)" -lt "$end" ]; do
  family=${families[RANDOM % ${#families[@]}]}
  provider=${provider_list[RANDOM % ${#provider_list[@]}]}
  fault=${faults[RANDOM % ${#faults[@]}]}
  victim=$((RANDOM % 2))
  at_ms=$((200 + RANDOM % 700))      # when the fault lands, after the ranks started
  pause_ms=$((100 + RANDOM % 400))   # pause: well inside the timeout
  # shellcheck disable=SC2207
  cmd="$fabflow bench $(workload "$family") -p $provider --timeout $timeout_ms --json"
  start=$(now)
  # shellcheck disable=SC2086
  $cmd > "$work/out" 2> "$work/err" &
  launcher=$!
  ranks=()
  for _ in $(seq 1 100); do
    mapfile -t ranks < <(pgrep -P "$launcher" | sort -n)
    [ "${#ranks[@]}" -ge 2 ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.02
  done
  fault_at=""
  if [ "$fault" != none ] && [ "${#ranks[@]}" -ge 2 ]; then
    sleep "$(printf '0.%03d' $((at_ms % 1000)))"
    [ "$at_ms" -ge 1000 ] && sleep 1
    target=${ranks[$victim]}
    if kill -0 "$target" 2>/dev/null; then
      fault_at=$(now)
      case $fault in
        pause)
          kill -STOP "$target" 2>/dev/null || true
          sleep "$(printf '0.%03d' "$pause_ms")"
          kill -CONT "$target" 2>/dev/null || true ;;
        stop) kill -STOP "$target" 2>/dev/null || true ;;
        kill) kill -KILL "$target" 2>/dev/null || true ;;
      esac
    fi
  fi
  # Bounded: a hang is a violation, not a stuck campaign.
  limit=$((60 + margin))
  waited=0
  while kill -0 "$launcher" 2>/dev/null && [ "$waited" -lt $((limit * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -KILL "$launcher" "${ranks[@]}" 2>/dev/null || true
    violation "the run did not end within ${limit} s"
  fi
  rc=0
  wait "$launcher" || rc=$?
  ended=$(now)
  runs=$((runs + 1))
  result=ok
  if [ "$rc" -eq 0 ]; then
    # Completed: the bench verified its data; stopping for good or killing must not pass.
    grep -q '^fabflow: error: ' "$work/err" && violation "exit 0 with an error line"
    if [ -n "$fault_at" ] && { [ "$fault" = stop ] || [ "$fault" = kill ]; }; then
      violation "exit 0 although rank $victim was ${fault}ed mid-run"
    fi
    grep -q '"error"' "$work/out" && violation "a result row carries an error"
    result="completed"
  else
    [ "$fault" = none ] && violation "exit $rc without a fault"
    [ "$(grep -c . "$work/err")" -eq 1 ] || violation "exit $rc without exactly one error line"
    grep -q '^fabflow: error: ' "$work/err" || violation "the error line lacks 'fabflow: error: '"
    if [ -n "$fault_at" ] && [ "$fault" != pause ]; then
      took=$(echo "$ended - $fault_at" | bc)
      over=$(echo "$took > $((timeout_ms / 1000 + margin))" | bc)
      [ "$over" -eq 1 ] && violation "the run took ${took} s after the fault to end"
    fi
    [ "$fault" = pause ] && violation "a ${pause_ms} ms pause (timeout ${timeout_ms} ms) failed the run"
    result="failed: $(cut -c1-110 "$work/err")"
  fi
  # Nothing left: no process of the run, no shared-memory region of its ranks.
  for pid in "${ranks[@]}"; do
    if kill -0 "$pid" 2>/dev/null && [ "$(ps -o ppid= -p "$pid" | tr -d ' ')" = "$launcher" ]; then
      violation "rank pid $pid is still running"
    fi
    if compgen -G "/dev/shm/fabflow_${pid}_*" > /dev/null; then
      violation "rank pid $pid left $(ls /dev/shm/fabflow_"${pid}"_* | head -1)"
    fi
  done
  outcome[$fault]=$((${outcome[$fault]:-0} + 1))
  printf 'chaos: %-5s %-5s %-5s rank %d at %4d ms: %s (%.1f s)\n' "$family" "$provider" "$fault" \
    "$victim" "$at_ms" "$result" "$(echo "$ended - $start" | bc)"
done
echo "chaos: ${runs} runs, no violation (none ${outcome[none]:-0}, pause ${outcome[pause]:-0}," \
  "stop ${outcome[stop]:-0}, kill ${outcome[kill]:-0})"
