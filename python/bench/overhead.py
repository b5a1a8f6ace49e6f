"""What calling fabflow from Python costs: 64-byte queue items per second from Python
(enqueue_many / dequeue_many) against `fabflow bench queue` with the same design, batch and
capacity, and 8 MB bulk bandwidth from Python (send / recv_into of one numpy array) against
`fabflow bench bulk` with the protocol the Python channel chose, one message in flight, on each
provider, in the same run (issue 47, item 4; the figures are in docs/python.md).

    python3 python/bench/overhead.py [--fabflow build/fabflow] [-p local,shm] [--json]

Run it with the Python that has the fabflow package (a venv of `pip install ./python`); it
starts the Python ranks itself with `fabflow launch -n 2 --pin` (the C++ benches pin theirs).
"""

import argparse
import json
import os
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
        batch = [bytes([i & 0xFF]) * ITEM_BYTES for i in range(args.burst)]
        rank.barrier()
        for _ in range(args.items // args.burst):
            q.enqueue_many(batch)
        q.close()
        return
    q = fabflow.Consumer(rank, 0, design=args.design, provider=args.provider,
                         item_bytes=ITEM_BYTES, capacity=args.capacity)
    rank.barrier()
    start, count = time.perf_counter(), 0
    while True:
        got = q.dequeue_many(args.burst)
        if not got:
            break
        count += len(got)
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


def launch_python(args, part, provider):
    cmd = [args.fabflow, "launch", "-n", "2", "--pin", "--", sys.executable,
           os.path.abspath(__file__), "--part", part, "-p", provider, "--design", args.design,
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
    p.add_argument("--json", action="store_true")
    p.add_argument("--part", choices=["queue", "bulk"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        args.provider = args.providers
        return queue_rank(args) if args.part == "queue" else bulk_rank(args)
    rows = []
    for provider in args.providers.split(","):
        py_q = launch_python(args, "queue", provider)
        cxx_q, q_cmd = run_bench(args, "queue", [
            "-p", provider, "-S", str(ITEM_BYTES), "--design", args.design,
            "--items", str(args.items), "--burst", str(args.burst),
            "--capacity", str(args.capacity)])
        py_b = launch_python(args, "bulk", provider)
        cxx_b, b_cmd = run_bench(args, "bulk", [
            "-p", provider, "-S", "8M", "--protocol", py_b["protocol"], "--window", "1",
            "--bytes", str(args.messages * BULK_BYTES)])
        rows.append({
            "provider": provider, "design": args.design, "burst": args.burst,
            "python_items_per_s": py_q["items_per_s"], "cxx_items_per_s": cxx_q["items_per_s"],
            "items_ratio": py_q["items_per_s"] / cxx_q["items_per_s"],
            "protocol": py_b["protocol"], "python_mb_s": py_b["mb_s"],
            "cxx_mb_s": cxx_b["stream_mb_s"], "bulk_ratio": py_b["mb_s"] / cxx_b["stream_mb_s"],
            "busy": bool(cxx_q["environment"].get("busy")),
            "load": cxx_q["environment"].get("load_start"),
            "cxx_queue_command": q_cmd, "cxx_bulk_command": b_cmd})
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"# fabflow {fabflow.version()}: Python against C++ in the same run "
          f"(64 B items, batches of {args.burst}; 8 MB messages, one in flight)")
    print(f"{'provider':<9}{'py items/s':>14}{'C++ items/s':>14}{'ratio':>7}   "
          f"{'protocol':<12}{'py MB/s':>9}{'C++ MB/s':>10}{'ratio':>7}  busy")
    for r in rows:
        print(f"{r['provider']:<9}{r['python_items_per_s']:>14,.0f}{r['cxx_items_per_s']:>14,.0f}"
              f"{r['items_ratio']:>7.2f}   {r['protocol']:<12}{r['python_mb_s']:>9,.0f}"
              f"{r['cxx_mb_s']:>10,.0f}{r['bulk_ratio']:>7.2f}  "
              f"{'yes (load ' + format(r['load'], '.1f') + ')' if r['busy'] else 'no'}")


if __name__ == "__main__":
    main()
