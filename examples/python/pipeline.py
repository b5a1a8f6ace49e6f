"""A producer/consumer pipeline of numpy arrays over a flow queue.

Rank 0 produces N items, each a numpy array of eight uint64 (64 bytes: item i holds
8i .. 8i+7), enqueued in batches; rank 1 dequeues them, checks that they arrive in order and
sums them. The producer sends its checksum after the last item and the consumer compares.

    fabflow launch -n 2 -- python3 examples/python/pipeline.py [--items N] [-p PROVIDER]
"""

import argparse
import sys
import time

import numpy as np

import fabflow

ITEM = 8  # uint64 values per item: 64 bytes


def produce(rank, args):
    q = fabflow.Producer(rank, peer=1, provider=args.provider, design=args.design,
                         item_bytes=ITEM * 8, capacity=1024)
    print(f"design: {q.why or args.design}")
    checksum = np.uint64(0)
    start = time.perf_counter()
    for first in range(0, args.items, args.batch):
        last = min(first + args.batch, args.items)
        block = np.arange(first * ITEM, last * ITEM, dtype=np.uint64).reshape(-1, ITEM)
        checksum += block.sum(dtype=np.uint64)
        q.enqueue_many(list(block))  # one numpy array (a row of the block) per item
    q.enqueue(np.array([checksum], dtype=np.uint64))
    q.close()
    seconds = time.perf_counter() - start
    print(f"producer: {args.items} items sent, checksum {int(checksum)}, "
          f"{args.items / seconds:,.0f} items/s")
    return 0


def consume(rank, args):
    q = fabflow.Consumer(rank, peer=0, provider=args.provider, design=args.design,
                         item_bytes=ITEM * 8, capacity=1024)
    checksum, count, theirs = np.uint64(0), 0, None
    while True:
        batch = q.dequeue_many(args.batch)
        if not batch:
            break
        if count + len(batch) > args.items:  # the producer's checksum is the last item
            theirs = int(np.frombuffer(batch.pop(), dtype=np.uint64)[0])
        if not batch:
            continue
        values = np.frombuffer(b"".join(batch), dtype=np.uint64).reshape(-1, ITEM)
        expected_first = np.arange(count, count + len(batch), dtype=np.uint64) * ITEM
        if not np.array_equal(values[:, 0], expected_first):
            print(f"consumer: items out of order or damaged after item {count}", file=sys.stderr)
            return 1
        checksum += values.sum(dtype=np.uint64)
        count += len(batch)
    same = theirs is not None and theirs == int(checksum) and count == args.items
    print(f"consumer: {count} items received, checksum {int(checksum)} "
          f"{'matches' if same else 'DOES NOT MATCH'} the producer's ({theirs})")
    return 0 if same else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--design", default="auto")
    p.add_argument("-p", "--provider", default="auto")
    args = p.parse_args()
    if args.items < 1 or not 1 <= args.batch <= 65536:
        p.error("--items must be at least 1 and --batch in 1..65536")
    rank = fabflow.Rank()
    if rank.size != 2:
        p.error("run it as two ranks: fabflow launch -n 2 -- python3 pipeline.py")
    return produce(rank, args) if rank.rank == 0 else consume(rank, args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except fabflow.Error as e:
        sys.exit(f"pipeline: {e}")
