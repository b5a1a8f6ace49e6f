"""An RPC echo over a request-response channel.

Rank 0 is the client: it sends N requests one at a time and checks that each response is its
request upper-cased. Rank 1 is the server: its handler builds that response. The client prints
the mean round trip.

    fabflow launch -n 2 -- python3 examples/python/rpc_echo.py [-n N] [-p PROVIDER]
"""

import argparse
import sys
import time

import fabflow


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", "--requests", type=int, default=10000)
    p.add_argument("--pattern", default="auto")
    p.add_argument("-p", "--provider", default="auto")
    args = p.parse_args()
    if args.requests < 1:
        p.error("-n must be at least 1")
    rank = fabflow.Rank()
    if rank.size != 2:
        p.error("run it as two ranks: fabflow launch -n 2 -- python3 rpc_echo.py")
    if rank.rank == 1:
        server = fabflow.Responder(rank, pattern=args.pattern, provider=args.provider)
        served = server.serve(lambda request: request.upper())
        print(f"server: {served} requests served")
        return 0
    client = fabflow.Requester(rank, pattern=args.pattern, provider=args.provider)
    print(f"pattern: {client.why or args.pattern}")
    start = time.perf_counter()
    for i in range(args.requests):
        text = f"request {i} from the echo client".encode()
        answer = client.call(text)
        if answer != text.upper():
            print(f"rpc_echo: response {i} is {answer!r}", file=sys.stderr)
            return 1
    seconds = time.perf_counter() - start
    client.close()
    print(f"client: {args.requests} echoes checked, mean round trip "
          f"{seconds * 1e6 / args.requests:.2f} us")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except fabflow.Error as e:
        sys.exit(f"rpc_echo: {e}")
