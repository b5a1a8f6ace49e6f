#!/usr/bin/env python3
"""Runs a GoogleTest binary's tests in groups: one process per group instead of one per test.

Under ASan each process of fabflow_tests costs about 0.14 s before its first test and after its
last (the sanitizer's start-up and LeakSanitizer's scan of the binary's 100 MB of globals),
which for the ~1300 tests of the ASan tree was a minute and a half of the test command. This
runner selects tests by the same regular expressions as ctest's -R and -E (searched anywhere
in the full test name, the name ctest shows), groups them by suite (at most --group tests per
process), and runs the groups on --jobs workers, longest suites first.

A failing group is rerun one test per process, so the failure names its test as ctest would;
a group that fails while each of its tests passes on its own is reported as failing too (tests
that disturb each other are a defect, not noise). Exit status: 0 when every test passed.

  scripts/run_grouped.py BINARY [-R REGEX] [-E REGEX] [--jobs N] [--group N] [--timeout S]

The test command (scripts/test.sh) runs the ASan tree's tests with it; the release and TSan
trees keep ctest (a process per test costs nothing there).
"""

import argparse
import re
import subprocess
import sys
import threading
import time
from collections import OrderedDict


def list_tests(binary):
    out = subprocess.run([binary, "--gtest_list_tests"], check=True, capture_output=True,
                         text=True).stdout
    names, suite = [], None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()  # "Prefix/Suite."
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


def run(binary, names, timeout):
    """Runs the named tests in one process: (ok, seconds, output)."""
    start = time.monotonic()
    try:
        proc = subprocess.run([binary, "--gtest_filter=" + ":".join(names)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=timeout)
        ok, output = proc.returncode == 0, proc.stdout
        ran = re.search(r"^\[==========\] (\d+) tests? from .* ran\.", output, re.M)
        if ok and (not ran or int(ran.group(1)) != len(names)):
            ok, output = False, output + "\nrun_grouped: not every selected test ran\n"
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        ok, output = False, text + f"\nrun_grouped: killed after {timeout:.0f} s\n"
    return ok, time.monotonic() - start, output


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("-R", dest="include", default="", help="run only tests matching (search)")
    ap.add_argument("-E", dest="exclude", default="", help="leave out tests matching (search)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--group", type=int, default=40, help="at most this many tests per process")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds allowed for one test (a group: this plus 5 s per test)")
    args = ap.parse_args()

    include = re.compile(args.include) if args.include else None
    exclude = re.compile(args.exclude) if args.exclude else None
    selected = [n for n in list_tests(args.binary)
                if (not include or include.search(n)) and not (exclude and exclude.search(n))]
    if not selected:
        print("run_grouped: no test matches", file=sys.stderr)
        return 1

    suites = OrderedDict()
    for n in selected:
        suites.setdefault(n.split(".")[0], []).append(n)
    groups = []
    for names in suites.values():
        for i in range(0, len(names), args.group):
            groups.append(names[i:i + args.group])
    groups.sort(key=len, reverse=True)  # the longest first: the workers finish together

    lock = threading.Lock()
    failed, done, processes = [], [0], [0]
    start = time.monotonic()

    def worker():
        while True:
            with lock:
                if not groups:
                    return
                names = groups.pop(0)
            ok, took, output = run(args.binary, names, args.timeout + 5 * len(names))
            bad = []
            if not ok:
                for n in names:  # one process per test: which failed, with its own output
                    alone_ok, _, alone_out = run(args.binary, [n], args.timeout)
                    if not alone_ok:
                        bad.append((n, alone_out))
                if not bad:
                    bad.append((f"{len(names)} tests of {names[0].split('.')[0]} together "
                                "(each passes alone)", output))
            with lock:
                done[0] += len(names)
                processes[0] += 1 + (len(names) if not ok else 0)
                print(f"{done[0]:5d}/{len(selected)} {len(names):3d} tests of "
                      f"{names[0].split('.')[0]:<40} {'Passed' if not bad else '***Failed'} "
                      f"{took:6.2f} sec", flush=True)
                for n, out in bad:
                    print(f"---- {n}\n{out}", flush=True)
                failed.extend(n for n, _ in bad)

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\n{'all' if not failed else 'not all'} of {len(selected)} tests passed "
          f"({len(suites)} suites, {processes[0]} processes), {time.monotonic() - start:.1f} s")
    if failed:
        print("The following tests FAILED:")
        for n in failed:
            print("\t" + n)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
