"""A service and its clients started by hand in two shells (fabflow.Node), in Python.

The server listens and serves one client at a time; each client's session runs a flow queue
(N numbered items), request-response calls (M calls, each answered with its number doubled)
and one bulk transfer (B bytes) over its one connection, then leaves. Both sides print the
counts and a checksum, which match; a client killed mid-session fails its own session (the
server prints the fabflow.PeerError it raised) and the server goes on. Ctrl-C stops the server.

    export FABFLOW_SECRET=some-secret
    python3 examples/python/service.py serve 127.0.0.1:7000           # shell 1
    python3 examples/python/service.py connect 127.0.0.1:7000         # shell 2, as often as you like

In a session the server is rank 1 and the client rank 0 (a Requester comes first).
"""

import argparse
import hashlib
import sys

import fabflow


def session_line(items, queue_sum, calls, nbytes, bulk_sum):
    return (f"{items} items in order (sha256 {queue_sum[:16]}), {calls} calls answered, "
            f"{nbytes} bytes (sha256 {bulk_sum[:16]})")


def item(i):
    return i.to_bytes(8, "little") * 8


def serve_one(rank, provider):
    queue = hashlib.sha256()
    items = 0
    for got in fabflow.Consumer(rank, peer=0, provider=provider, item_bytes=64):
        if bytes(got) != item(items):
            raise fabflow.Error(f"item {items} out of order or torn")
        queue.update(got)
        items += 1
    calls = fabflow.Responder(rank, provider=provider, request_bytes=8, response_bytes=8).serve(
        lambda request: (int.from_bytes(request, "little") * 2).to_bytes(8, "little"))
    bulk = fabflow.Bulk(rank, provider=provider)
    size = bytearray(8)
    bulk.recv_into(size, peer=0, tag=0)
    nbytes = int.from_bytes(size, "little")
    if nbytes > 1 << 30:
        raise fabflow.Error(f"the client announced {nbytes} bytes, over the 1 GiB this server takes")
    data = bytearray(nbytes)
    bulk.recv_into(data, peer=0, tag=1)
    bulk.close()
    return session_line(items, queue.hexdigest(), calls, nbytes, hashlib.sha256(data).hexdigest())


def serve(address, provider):
    node = fabflow.Node()
    print("listening on", node.listen(address), flush=True)
    try:
        while True:
            rank = node.accept(timeout=0.5, rank=1)
            if rank is None:
                continue
            try:
                print("client:", serve_one(rank, provider), flush=True)
            except fabflow.PeerError as e:  # it vanished or stopped answering
                print("client left:", e, flush=True)
            except fabflow.Error as e:  # it broke the protocol; the next one is served all the same
                print("client failed:", e, flush=True)
            del rank  # the session ends with its last end
    except KeyboardInterrupt:
        print("stopped")
    return 0


def connect(address, provider, items, calls, nbytes):
    rank = fabflow.Node().connect(address, rank=0)
    q = fabflow.Producer(rank, peer=1, provider=provider, item_bytes=64)
    queue = hashlib.sha256()
    for i in range(items):
        q.enqueue(item(i))
        queue.update(item(i))
    q.close()
    r = fabflow.Requester(rank, provider=provider, request_bytes=8, response_bytes=8)
    for i in range(calls):
        if int.from_bytes(r.call(i.to_bytes(8, "little")), "little") != 2 * i:
            raise fabflow.Error(f"call {i} got a wrong answer")
    r.close()
    bulk = fabflow.Bulk(rank, provider=provider)
    data = bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256)
    bulk.send(nbytes.to_bytes(8, "little"), peer=1, tag=0)
    bulk.send(data, peer=1, tag=1)
    bulk.close()
    print(session_line(items, queue.hexdigest(), calls, nbytes, hashlib.sha256(data).hexdigest()))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["serve", "connect"])
    p.add_argument("address", help="host:port")
    p.add_argument("-p", "--provider", default="auto")
    p.add_argument("-n", "--items", type=int, default=100000)
    p.add_argument("-m", "--calls", type=int, default=10000)
    p.add_argument("-b", "--bytes", type=int, default=64 << 20)
    args = p.parse_args()
    if min(args.items, args.calls, args.bytes) < 0 or args.bytes > 1 << 30:
        p.error("-n, -m and -b must be at least 0, and -b at most 1 GiB")
    try:
        if args.mode == "serve":
            return serve(args.address, args.provider)
        return connect(args.address, args.provider, args.items, args.calls, args.bytes)
    except fabflow.Error as e:
        print(f"service.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
