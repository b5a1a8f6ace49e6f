#!/usr/bin/env python3
"""Checks an `experiment run all` folder: every runnable entry of `fabflow experiment list
--json` (read from stdin) wrote its JSONL, PNG, SVG and page, and index.html names them all.

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
    problems = []
    for exp_id in runnable:
        for ext in ("jsonl", "png", "svg", "html"):
            path = os.path.join(out, f"{exp_id}.{ext}")
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                problems.append(f"{path} is missing or empty")
    index = os.path.join(out, "index.html")
    text = open(index, encoding="utf-8").read() if os.path.isfile(index) else ""
    if not text:
        problems.append(f"{index} is missing or empty")
    problems += [f"{index} does not show {i}" for i in runnable if text and i not in text]
    for p in problems:
        print(f"check_experiments: {p}", file=sys.stderr)
    print(f"check_experiments: {len(runnable) - len({p.split('/')[-1].split('.')[0] for p in problems})}"
          f" of {len(runnable)} runnable experiments complete in {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
