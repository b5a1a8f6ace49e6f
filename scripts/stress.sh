#!/usr/bin/env bash
# The stress target: FIFO order, exactly-once delivery and checksummed payloads over
# FABFLOW_FLOW_STRESS_ITEMS (default 10^7) items per flow design point, with random item sizes
# and random pauses, on shm, tcp, tcp;ofi_rxm and local. Takes hours for every point; pass a
# GoogleTest filter to narrow it.
#   scripts/stress.sh                                  every point, 10^7 items each
#   scripts/stress.sh '*push1_watermark_pull_shm_rdm' 1000000
#   scripts/stress.sh profiles [NAME...]              every family under every provider profile
#                                                     (scripts/profile_matrix.sh; docs/portability.md)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = profiles ]; then
  shift
  exec scripts/profile_matrix.sh "$@"
fi
filter=${1:-*}
items=${2:-10000000}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build fabflow_tests
FABFLOW_FLOW_STRESS=1 FABFLOW_FLOW_STRESS_ITEMS=$items \
  build/fabflow_tests --gtest_filter="*FlowStress.*${filter#\*}"
