#!/usr/bin/env bash
# The full matrix of issue 45 that the test command runs only in part: every bench family with
# every design, pattern x model and protocol, under every built-in provider profile, on shm
# (tcp's msg endpoints for a profile of connected endpoints only, verbs-rc). Each run must end
# with status 0: every design verified or refused with its reason (docs/portability.md).
#   scripts/profile_matrix.sh            every built-in profile
#   scripts/profile_matrix.sh efa cxi    these
# Needs build/fabflow (scripts/setup.sh). About 10 minutes on a 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
fabflow=build/fabflow
profiles=("$@")
if [ ${#profiles[@]} -eq 0 ]; then
  # The built-in names, as `fabflow info --profile` lists them for an unknown one.
  list=$($fabflow info --profile ? 2>&1 | sed -n 's/.*(known: \([^;]*\);.*/\1/p' || true)
  IFS=', ' read -r -a profiles <<<"$list"
fi
failed=0
for p in "${profiles[@]}"; do
  where=(-p shm)
  if $fabflow info --profile "$p" --json | /usr/bin/python3 -c \
      'import json,sys; c={e["field"]: e["value"] for e in json.load(sys.stdin)["capabilities"]}; sys.exit(0 if "rdm" in c["endpoint_types"] else 1)'; then
    :
  else
    where=(-p tcp -e msg)
  fi
  runs=(
    "queue --design all --items 20000"
    "queue --design basic,batching,datamover --items 20000"
    "rr --pattern all --model all"
    "kv --design all --clients 2 --workers 2 --keys 1000 -I 2000 -w 200"
    "seq --design all"
    "bulk --protocol all -S 64,64K,1M,8M --bytes 32M"
  )
  for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    out=$($fabflow bench $r "${where[@]}" --profile "$p" --json 2>&1) && status=0 || status=$?
    rows=$(grep -c '^{' <<<"$out" || true)
    refused=$(grep -c '"unsupported"' <<<"$out" || true)
    printf '%-9s %-60s status %d  rows %3d  refused %3d\n' "$p" "$r ${where[*]}" "$status" \
      "$rows" "$refused"
    if [ "$status" -ne 0 ]; then
      failed=$((failed + 1))
      grep -v '^{' <<<"$out" | tail -3 | sed 's/^/    /'
    fi
  done
done
[ "$failed" -eq 0 ] && echo "profile matrix: every run ended with status 0" ||
  { echo "profile matrix: $failed run(s) failed"; exit 1; }
