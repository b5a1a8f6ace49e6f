#!/usr/bin/env python3
"""fabflow.results.load reads every JSON-lines file of an experiment run, and the JSON of every
bench family those files hold plus bench xfer's (issue 47's done-when).

    python scripts/check_results_load.py RUN_DIR XFER_JSONL

Each file must load as a non-empty list of objects, each with its `bench` (the experiment
files' header line names the entry instead); every family of fabflow's benches must appear.
Exits 1 naming what failed.
"""
import glob
import os
import sys

import fabflow.results

FAMILIES = {"raw", "lat", "queue", "rr", "seq", "inbound", "kv", "bulk", "beff", "xfer"}


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    run_dir, xfer = argv
    files = sorted(glob.glob(os.path.join(run_dir, "*.jsonl"))) + [xfer]
    seen = set()
    for path in files:
        rows = fabflow.results.load(path, frame=False)
        if not rows:
            print(f"check_results_load: {path}: no rows", file=sys.stderr)
            return 1
        seen.update(r["bench"] for r in rows if isinstance(r.get("bench"), str))
    missing = FAMILIES - seen
    if missing:
        print(f"check_results_load: no rows of {sorted(missing)} in {len(files)} files",
              file=sys.stderr)
        return 1
    print(f"check_results_load: {len(files)} files, bench families {sorted(seen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
