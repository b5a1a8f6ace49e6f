"""fabflow for Python: ranks, flow queues, request-response, bulk transfer, a key-value store
and benchmark results.

    import fabflow
    rank = fabflow.Rank()                        # started by fabflow launch, mpirun or srun
    if rank.rank == 0:
        q = fabflow.Producer(rank, peer=1)       # design "auto": the advise profile's, or the rule
        q.enqueue(b"hello")                      # any contiguous buffer: bytes, numpy arrays
        q.close()
    else:
        q = fabflow.Consumer(rank, peer=0)
        for item in q:                           # memoryviews, until the producer closes
            print(bytes(item))

Every call that waits releases the GIL and honours Ctrl-C; fabflow's errors are fabflow.Error
with the C++ library's message. fabflow.results.load(path) reads the JSON lines of
`fabflow bench ... --json` and of experiment runs. docs/python.md.
"""

from . import results
from ._fabflow import (Bulk, BulkRequest, Error, KVClient, KVServer, Node, PeerError, Producer,
                       Rank, Requester, Responder, info, thread_ranks, version)
from ._fabflow import Consumer as _Consumer


class _Peeked:
    """The `with` block of Consumer.peek(): the item in place in the ring while it lasts."""

    def __init__(self, consumer):
        self._consumer = consumer
        self._view = None

    def __enter__(self):
        self._view = self._consumer._peek()
        return self._view

    def __exit__(self, *exc):
        view, self._view = self._view, None
        if view is None:
            return False
        try:
            view.release()
        except BufferError as e:
            self._consumer._release()
            raise Error("fabflow: peek: a view of the item outlived its `with` block "
                        "(the slot is reused now): copy what must be kept") from e
        self._consumer._release()
        return False


class Consumer(_Consumer):
    """The consumer end of a flow queue; iterating over it yields items until the end."""

    def __iter__(self):
        while True:
            item = self.dequeue()
            if item is None:
                return
            yield item

    def peek(self):
        """Zero-copy: `with consumer.peek() as view:` waits for the next item and gives a
        read-only memoryview of it where it lies in this end's ring (None at the end of the
        stream); the slot is handed back when the block ends, and the view with it."""
        return _Peeked(self)


__all__ = ["Bulk", "BulkRequest", "Consumer", "Error", "KVClient", "KVServer", "Node", "PeerError",
           "Producer", "Rank", "Requester", "Responder", "info", "results", "thread_ranks",
           "version"]
