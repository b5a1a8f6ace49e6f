"""fabflow for Python: ranks, flow queues and benchmark results.

    import fabflow
    rank = fabflow.Rank()                        # started by fabflow launch, mpirun or srun
    if rank.rank == 0:
        q = fabflow.Producer(rank, peer=1)       # design "auto": the advise profile's, or the rule
        q.enqueue(b"hello")                      # any contiguous buffer: bytes, numpy arrays
        q.close()
    else:
        q = fabflow.Consumer(rank, peer=0)
        for item in q:                           # bytes, until the producer closes
            print(item)

fabflow.results.load(path) reads the JSON lines of `fabflow bench ... --json` and of
experiment runs. The C++ core is the extension module _fabflow, built with the library
(CMake option FABFLOW_PYTHON); docs/python.md.
"""

from . import results
from ._fabflow import Error, Producer, Rank, thread_ranks, version
from ._fabflow import Consumer as _Consumer


class Consumer(_Consumer):
    """The consumer end of a flow queue; iterating over it yields items until the end."""

    def __iter__(self):
        while True:
            item = self.dequeue()
            if item is None:
                return
            yield item


__all__ = ["Consumer", "Error", "Producer", "Rank", "results", "thread_ranks", "version"]
