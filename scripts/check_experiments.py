#!/usr/bin/env python3
"""Checks an `experiment run all` folder: every runnable entry of `fabflow experiment list
--json` (read from stdin) wrote its JSONL, PNG, SVG and page, no point was refused (on the
provider the test command uses every point runs), and index.html names them all.

    build/fabflow experiment list --json | scripts/check_experiments.py OUT_DIR
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: fabflow experiment list --json | check_experiments.py DIR", file=sys.stderr)
        return 2
    out = sys.argv[1]
    entries = [json.loads(line) for line in sys.stdin if line.strip()]
    runnable = [e["id"] for e in entries if e.get("runnable")]
    problems, bad_ids = [], set()
    for exp_id in runnable:
        before = len(problems)
        for ext in ("jsonl", "png", "svg", "html"):
            path = os.path.join(out, f"{exp_id}.{ext}")
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                problems.append(f"{path} is missing or empty")
        # A point the bench refused as a whole (refused_point rows) is fine on a provider that
        # lacks what it needs, but every point runs on the one the test command uses: here a
        # refusal is a catalogue or bench fault. The one exception is an unreliable (dgram)
        # endpoint, which no reliable transport has by design (002-fig18 sweeps it for udp and
        # verbs).
        path = os.path.join(out, f"{exp_id}.jsonl")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line) if line.strip() else {}
                    if row.get("refused_point") and \
                            "offers no dgram endpoints" not in str(row.get("unsupported")):
                        problems.append(f"{path}: point {row.get('point_index', 0) + 1} was "
                                        f"refused: {row.get('unsupported')}")
        if len(problems) > before:
            bad_ids.add(exp_id)
    index = os.path.join(out, "index.html")
    text = open(index, encoding="utf-8").read() if os.path.isfile(index) else ""
    if not text:
        problems.append(f"{index} is missing or empty")
    missing = [i for i in runnable if text and i not in text]
    problems += [f"{index} does not show {i}" for i in missing]
    bad_ids.update(missing)
    for p in problems:
        print(f"check_experiments: {p}", file=sys.stderr)
    print(f"check_experiments: {len(runnable) - len(bad_ids)} of {len(runnable)} runnable "
          f"experiments complete in {out}" + ("" if text else " (no index)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
