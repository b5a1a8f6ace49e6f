"""A large numpy array sent with bulk transfer, received in place into a numpy array.

Rank 0 sends an array of float64 (256 MiB by default) with Bulk.send; rank 1 receives it with
Bulk.irecv into an empty array of the same shape and waits on the request. Both print the sum
of the array, and rank 1 checks it against the sum it expects and prints the bandwidth.

    fabflow launch -n 2 -- python3 examples/python/bulk_array.py [--mib N] [-p PROVIDER]
"""

import argparse
import sys
import time

import numpy as np

import fabflow


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("-p", "--provider", default="auto")
    args = p.parse_args()
    if not 1 <= args.mib <= 65536:
        p.error("--mib must be in 1..65536")
    rank = fabflow.Rank()
    if rank.size != 2:
        p.error("run it as two ranks: fabflow launch -n 2 -- python3 bulk_array.py")
    n = args.mib * (1 << 20) // 8
    expected = float(n) * (n - 1) / 2  # the sum of 0 .. n-1, exact in float64 up to 2**53
    channel = fabflow.Bulk(rank, provider=args.provider)
    array = np.arange(n, dtype=np.float64) if rank.rank == 0 else np.empty(n, dtype=np.float64)
    rank.barrier()  # both arrays are ready: the transfer alone is timed
    if rank.rank == 0:
        channel.send(array, peer=1, tag=1)
        print(f"sender: {array.nbytes >> 20} MiB sent, sum {array.sum():.0f}, protocol "
              f"{channel.choose(array.nbytes)}")
        channel.close()
        return 0
    start = time.perf_counter()
    request = channel.irecv(array, peer=0, tag=1)
    received = request.wait()
    seconds = time.perf_counter() - start
    total = array.sum()
    channel.close()
    ok = received == array.nbytes and total == expected
    print(f"receiver: {received >> 20} MiB received in place, sum {total:.0f} "
          f"{'as expected' if ok else f'EXPECTED {expected:.0f}'}, "
          f"{received / seconds / 1e6:,.0f} MB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except fabflow.Error as e:
        sys.exit(f"bulk_array: {e}")
