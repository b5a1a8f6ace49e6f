"""What calling fabflow from Python costs: 64-byte queue items per second from Python
(enqueue_many / dequeue_many of a list, and of a 2-D numpy array) against `fabflow bench queue` with the same design, batch and
capacity, and 8 MB bulk bandwidth from Python (send / recv_into of one numpy array) against
`fabflow bench bulk` with the protocol the Python channel chose, one message in flight, on each
provider, in the same run: interleaved rounds, medians reported (issue 47, item 4; the
figures are in docs/python.md).

    python3 python/bench/overhead.py [--fabflow build/fabflow] [-p local,shm] [--json]

Run it with the Python that has the fabflow package (a venv of `pip install ./python`); it
starts the Python ranks itself with `fabflow launch -n 2 --pin` (the C++ benches pin theirs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import fabflow

ITEM_BYTES = 64
BULK_BYTES = 8 << 20


def queue_rank(args):
    """One rank of the Python queue measurement; rank 1 prints the result."""
    rank = fabflow.Rank()
    if rank.rank == 0:
        q = fabflow.Producer(rank, 1, design=args.design, provider=args.provider,
                             item_bytes=ITEM_BYTES, capacity=args.capacity)
        if args.api == "list":  # a list of bytes objects, one per item
            batch = [bytes([i & 0xFF]) * ITEM_BYTES for i in range(args.burst)]
        else:  # one 2-D array, one row per item
            batch = np.arange(args.burst * ITEM_BYTES, dtype=np.uint8).reshape(args.burst, -1)
        rank.barrier()
        for _ in range(args.items // args.burst):
            q.enqueue_many(batch)
        q.close()
        return
    q = fabflow.Consumer(rank, 0, design=args.design, provider=args.provider,
                         item_bytes=ITEM_BYTES, capacity=args.capacity)
    out = np.empty((args.burst, ITEM_BYTES), dtype=np.uint8)
    rank.barrier()
    start, count = time.perf_counter(), 0
    while True:
        got = len(q.dequeue_many(args.burst)) if args.api == "list" else q.dequeue_many_into(out)
        if not got:
            break
        count += got
    seconds = time.perf_counter() - start
    print("RESULT " + json.dumps({"items": count, "items_per_s": count / seconds}))


def bulk_rank(args):
    """One rank of the Python bulk measurement; rank 1 prints the result."""
    rank = fabflow.Rank()
    ch = fabflow.Bulk(rank, provider=args.provider)
    buf = np.ones(BULK_BYTES, dtype=np.uint8)
    for _ in range(2):  # warm-up: the first messages map and fault in the pages
        ch.send(buf, 1) if rank.rank == 0 else ch.recv_into(buf, 0)
    rank.barrier()
    start = time.perf_counter()
    for _ in range(args.messages):
        ch.send(buf, 1) if rank.rank == 0 else ch.recv_into(buf, 0)
    seconds = time.perf_counter() - start
    if rank.rank == 1:
        print("RESULT " + json.dumps({"mb_s": args.messages * BULK_BYTES / seconds / 1e6,
                                      "protocol": ch.choose(BULK_BYTES)}))
    ch.close()


def launch_python(args, part, provider, api="list"):
    cmd = [args.fabflow, "launch", "-n", "2", "--pin", "--", sys.executable,
           os.path.abspath(__file__), "--part", part, "-p", provider, "--design", args.design,
           "--api", api,
           "--items", str(args.items), "--burst", str(args.burst),
           "--capacity", str(args.capacity), "--messages", str(args.messages)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    for line in r.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    sys.exit(f"overhead: the Python {part} run on {provider} failed:\n{r.stdout}{r.stderr}")


def run_bench(args, family, extra):
    cmd = [args.fabflow, "bench", family, "--json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not rows:
        sys.exit(f"overhead: {' '.join(cmd)} failed:\n{r.stderr}")
    return rows[-1], " ".join(cmd[1:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fabflow", default="build/fabflow", help="the fabflow CLI")
    p.add_argument("-p", "--providers", default="local,shm")
    p.add_argument("--design", default="push1-watermark-pull")
    p.add_argument("--items", type=int, default=2_000_000)
    p.add_argument("--burst", type=int, default=256, help="items per enqueue_many / dequeue_many")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--messages", type=int, default=32, help="8 MB messages timed")
    p.add_argument("--rounds", type=int, default=5, help="interleaved runs; medians reported")
    p.add_argument("--json", action="store_true")
    p.add_argument("--part", choices=["queue", "bulk"], help=argparse.SUPPRESS)
    p.add_argument("--api", choices=["list", "array"], default="list", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        args.provider = args.providers
        return queue_rank(args) if args.part == "queue" else bulk_rank(args)
    rows = []
    for provider in args.providers.split(","):
        runs = {"py_q": [], "py_qa": [], "cxx_q": [], "py_b": [], "cxx_b": []}
        busy, loads = False, []
        for _ in range(args.rounds):  # interleaved, so that a busy moment hits both sides
            py_q = launch_python(args, "queue", provider)
            py_qa = launch_python(args, "queue", provider, "array")
            cxx_q, q_cmd = run_bench(args, "queue", [
                "-p", provider, "-S", str(ITEM_BYTES), "--design", args.design,
                "--items", str(args.items), "--burst", str(args.burst),
                "--capacity", str(args.capacity)])
            py_b = launch_python(args, "bulk", provider)
            cxx_b, b_cmd = run_bench(args, "bulk", [
                "-p", provider, "-S", "8M", "--protocol", py_b["protocol"], "--window", "1",
                "--bytes", str(args.messages * BULK_BYTES)])
            runs["py_q"].append(py_q["items_per_s"])
            runs["py_qa"].append(py_qa["items_per_s"])
            runs["cxx_q"].append(cxx_q["items_per_s"])
            runs["py_b"].append(py_b["mb_s"])
            runs["cxx_b"].append(cxx_b["stream_mb_s"])
            busy = busy or bool(cxx_q["environment"].get("busy"))
            loads.append(cxx_q["environment"].get("load_start") or 0.0)
        med = {k: statistics.median(v) for k, v in runs.items()}
        rows.append({
            "provider": provider, "design": args.design, "burst": args.burst,
            "rounds": args.rounds, "python_items_per_s": med["py_q"],
            "python_array_items_per_s": med["py_qa"], "cxx_items_per_s": med["cxx_q"],
            "items_ratio": med["py_q"] / med["cxx_q"],
            "array_items_ratio": med["py_qa"] / med["cxx_q"],
            "protocol": py_b["protocol"], "python_mb_s": med["py_b"], "cxx_mb_s": med["cxx_b"],
            "bulk_ratio": med["py_b"] / med["cxx_b"], "runs": runs, "busy": busy,
            "load": max(loads), "cxx_queue_command": q_cmd, "cxx_bulk_command": b_cmd})
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"# fabflow {fabflow.version()}: Python against C++ in the same run, medians of "
          f"{args.rounds} interleaved rounds (64 B items, batches of {args.burst}; 8 MB "
          f"messages, one in flight)")
    print("# items/s: py list = enqueue_many(list of bytes) / dequeue_many; py array = "
          "enqueue_many(2-D array) / dequeue_many_into(2-D array); ratios against C++")
    print(f"{'provider':<9}{'py list':>12}{'ratio':>7}{'py array':>12}{'ratio':>7}"
          f"{'C++ items/s':>13}   {'protocol':<12}{'py MB/s':>9}{'C++ MB/s':>10}{'ratio':>7}  busy")
    for r in rows:
        print(f"{r['provider']:<9}{r['python_items_per_s']:>12,.0f}{r['items_ratio']:>7.2f}"
              f"{r['python_array_items_per_s']:>12,.0f}{r['array_items_ratio']:>7.2f}"
              f"{r['cxx_items_per_s']:>13,.0f}   {r['protocol']:<12}{r['python_mb_s']:>9,.0f}"
              f"{r['cxx_mb_s']:>10,.0f}{r['bulk_ratio']:>7.2f}  "
              f"{'yes (load up to ' + format(r['load'], '.1f') + ')' if r['busy'] else 'no'}")


if __name__ == "__main__":
    main()
