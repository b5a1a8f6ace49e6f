"""Tests of every call of the fabflow package between two thread ranks, on local and shm:
queues (copies, batches, zero-copy peek with its address asserted in the ring), request-
response, bulk transfer, the key-value store, fabflow.info(); the GIL released while a call
waits, KeyboardInterrupt while waiting, and the bad inputs each call must refuse in one line.
Which package they run against: fabflow_under_test.py.
"""

import _thread
import ctypes
import threading
import time
import unittest

from .fabflow_under_test import BUILD, fabflow, run_ranks

PROVIDERS = ("local", "shm")


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


def address(view):
    """Where a buffer's bytes lie (the buffer protocol's pointer)."""
    b = _PyBuffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    if get(view, ctypes.byref(b), 0) != 0:
        raise ValueError("no buffer")
    ptr = b.buf
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    release(ctypes.byref(b))
    return ptr


def item(i, size=64):
    return bytes((i * 13 + j) & 0xFF for j in range(size))


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class QueueTest(unittest.TestCase):
    def test_every_way_in_and_out_on_local_and_shm(self):
        for provider in PROVIDERS:
            got = []

            def produce(rank):
                q = fabflow.Producer(rank, 1, provider=provider, item_bytes=64, capacity=16)
                q.enqueue(item(0))
                q.enqueue(bytearray(item(1)))
                q.enqueue_many([item(i) for i in range(2, 40)])
                q.enqueue_many([memoryview(item(i))[: i % 64] for i in range(40, 60)])
                q.close()
                with self.assertRaisesRegex(fabflow.Error, "the producer is closed"):
                    q.enqueue(b"late")

            def consume(rank):
                q = fabflow.Consumer(rank, 0, provider=provider, item_bytes=64, capacity=16)
                got.append(bytes(q.dequeue()))
                out = bytearray(64)
                n = q.dequeue_into(out)
                got.append(bytes(out[:n]))
                while len(got) < 40:
                    got.extend(bytes(v) for v in q.dequeue_many(7))
                with q.peek() as view:
                    got.append(bytes(view))
                got.extend(bytes(v) for v in q)
                self.assertIsNone(q.dequeue())
                self.assertEqual(q.dequeue_many(), [])

            self.assertEqual(run_ranks(self, produce, consume), [], provider)
            want = [item(i) for i in range(40)] + [item(i)[: i % 64] for i in range(40, 60)]
            self.assertEqual(got, want, provider)

    def test_peek_gives_the_item_in_place_in_the_ring(self):
        capacity, addresses, seen = 8, [], []

        def produce(rank):
            q = fabflow.Producer(rank, 1, provider="local", item_bytes=64, capacity=capacity)
            for i in range(3 * capacity):
                q.enqueue(item(i))
            q.close()

        def consume(rank):
            q = fabflow.Consumer(rank, 0, provider="local", item_bytes=64, capacity=capacity)
            for _ in range(3 * capacity):
                with q.peek() as view:
                    self.assertTrue(view.readonly)
                    addresses.append(address(view))
                    seen.append(bytes(view))
                    kept = view
                with self.assertRaises(ValueError):  # the view went with its block
                    bytes(kept)
            with q.peek() as view:
                self.assertIsNone(view)

        self.assertEqual(run_ranks(self, produce, consume), [])
        self.assertEqual(seen, [item(i) for i in range(3 * capacity)])
        # One slot per item around the ring, and the same slots again on each turn: the views
        # lie in the ring, not in a copy (a copy would sit in one buffer, or a fresh one each).
        first = addresses[:capacity]
        self.assertEqual(len(set(first)), capacity, first)
        self.assertEqual(addresses[capacity:2 * capacity], first)
        self.assertEqual(addresses[2 * capacity:], first)
        self.assertLess(max(first) - min(first), 1 << 20)

    def test_numpy_arrays_go_in_without_conversion(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("no numpy")
        got = []

        def produce(rank):
            q = fabflow.Producer(rank, 1, provider="shm", item_bytes=8 * 100)
            for i in range(50):
                q.enqueue(np.arange(100, dtype=np.float64) * i)
            q.close()

        def consume(rank):
            q = fabflow.Consumer(rank, 0, provider="shm", item_bytes=8 * 100)
            with q.peek() as view:
                got.append(np.frombuffer(view, dtype=np.float64).sum())
            for view in q:
                got.append(np.frombuffer(view, dtype=np.float64).sum())

        self.assertEqual(run_ranks(self, produce, consume), [])
        self.assertEqual(got, [4950.0 * i for i in range(50)])

    def test_two_dimensional_arrays_go_in_and_out_a_row_per_item(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("no numpy")
        for provider in PROVIDERS:
            got = []

            def produce(rank):
                q = fabflow.Producer(rank, 1, provider=provider, item_bytes=64, capacity=64)
                with self.assertRaisesRegex(fabflow.Error, "this one has one"):
                    q.enqueue_many(b"abc")
                with self.assertRaisesRegex(fabflow.Error, "72 bytes; items are at most 64"):
                    q.enqueue_many(np.zeros((4, 9), dtype=np.uint64))
                for first in range(0, 1000, 100):
                    q.enqueue_many(np.arange(first * 8, (first + 100) * 8,
                                             dtype=np.uint64).reshape(100, 8))
                q.close()

            def consume(rank):
                q = fabflow.Consumer(rank, 0, provider=provider, item_bytes=64, capacity=64)
                out = np.zeros((37, 8), dtype=np.uint64)
                with self.assertRaisesRegex(fabflow.Error, "rows of 32 bytes; items may be 64"):
                    q.dequeue_many_into(np.zeros((4, 4), dtype=np.uint64))
                with self.assertRaisesRegex(fabflow.Error, "two or more dimensions"):
                    q.dequeue_many_into(bytearray(64))
                while True:
                    n = q.dequeue_many_into(out)
                    if n == 0:
                        break
                    got.append(out[:n].copy())

            self.assertEqual(run_ranks(self, produce, consume), [], provider)
            values = np.concatenate(got)
            self.assertEqual(values.shape, (1000, 8), provider)
            self.assertTrue(np.array_equal(values.ravel(), np.arange(8000, dtype=np.uint64)))

    def test_the_gil_is_released_while_dequeue_waits(self):
        ticks, during = [0], []
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks[0] += 1

        def produce(rank):
            q = fabflow.Producer(rank, 1, provider="local", item_bytes=16)
            time.sleep(0.5)  # the consumer waits meanwhile
            q.enqueue(b"late")
            q.close()

        def consume(rank):
            q = fabflow.Consumer(rank, 0, provider="local", item_bytes=16)
            before = ticks[0]
            self.assertEqual(bytes(q.dequeue()), b"late")
            during.append(ticks[0] - before)
            self.assertIsNone(q.dequeue())

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            self.assertEqual(run_ranks(self, produce, consume), [])
        finally:
            stop.set()
            ticker.join()
        self.assertGreater(during[0], 10000, "the ticker stood still while dequeue waited")

    def test_ctrl_c_interrupts_a_waiting_dequeue_and_the_queue_goes_on(self):
        ranks = fabflow.thread_ranks(2)
        opened, go, errors = threading.Event(), threading.Event(), []

        def produce():
            try:
                q = fabflow.Producer(ranks[0], 1, provider="local", item_bytes=16)
                opened.set()
                go.wait(30)
                q.enqueue(b"after")
                q.close()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        producer = threading.Thread(target=produce)
        producer.start()
        q = fabflow.Consumer(ranks[1], 0, provider="local", item_bytes=16, timeout=None)
        opened.wait(30)
        threading.Timer(0.3, _thread.interrupt_main).start()
        start = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            q.dequeue()
        self.assertLess(time.monotonic() - start, 5)
        go.set()
        self.assertEqual(bytes(q.dequeue()), b"after")
        self.assertIsNone(q.dequeue())
        producer.join(30)
        self.assertEqual(errors, [])

    def test_bad_input_is_refused_in_one_line(self):
        def produce(rank):
            q = fabflow.Producer(rank, 1, provider="local", item_bytes=16)
            for bad, message in ((123, "takes a buffer .* not int"),
                                 ("text", "takes a buffer .* not str"),
                                 (memoryview(b"abcdefgh")[::2], "contiguous"),
                                 (bytes(17), "17 bytes; items are at most 16")):
                with self.assertRaisesRegex(fabflow.Error, message):
                    q.enqueue(bad)
            with self.assertRaisesRegex(fabflow.Error, "takes a buffer"):
                q.enqueue_many([b"ok", None])
            q.enqueue(b"x" * 16)
            q.close()

        def consume(rank):
            q = fabflow.Consumer(rank, 0, provider="local", item_bytes=16)
            with self.assertRaisesRegex(fabflow.Error, "needs a writable buffer; this bytes is "
                                                        "read-only"):
                q.dequeue_into(bytes(16))
            with self.assertRaisesRegex(fabflow.Error, "holds 8 bytes; items may be 16"):
                q.dequeue_into(bytearray(8))
            with self.assertRaisesRegex(fabflow.Error, "max_items must be"):
                q.dequeue_many(0)
            with q.peek() as view:
                with self.assertRaisesRegex(fabflow.Error, "still held by peek"):
                    q.dequeue()
                self.assertEqual(bytes(view), b"x" * 16)
            self.assertIsNone(q.dequeue())

        self.assertEqual(run_ranks(self, produce, consume), [])
        rank = fabflow.thread_ranks(1)[0]
        for kwargs, message in (({"peer": 0}, "peer must be another rank"),
                                ({"peer": 1, "item_bytes": 0}, "item_bytes must be"),
                                ({"peer": 1, "timeout": -1}, "timeout must be"),
                                ({"peer": 1, "design": "fast"}, "unknown design 'fast'")):
            with self.assertRaisesRegex(fabflow.Error, message):
                fabflow.Producer(rank, **kwargs)


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class ChannelTest(unittest.TestCase):
    def test_call_and_serve_on_local_and_shm(self):
        for provider in PROVIDERS:
            answers, served = [], []

            def request(rank):
                ch = fabflow.Requester(rank, provider=provider, request_bytes=256,
                                       response_bytes=256)
                for i in range(100):
                    answers.append(ch.call(f"request {i}".encode()))
                answers.append(ch.call(bytearray(b"")))
                with self.assertRaisesRegex(fabflow.Error, "300 bytes; this channel takes up "
                                                            "to 256"):
                    ch.call(bytes(300))
                with self.assertRaisesRegex(fabflow.Error, "responder must be in 0..0"):
                    ch.call(b"x", responder=1)
                ch.close()

            def respond(rank):
                ch = fabflow.Responder(rank, provider=provider, request_bytes=256,
                                       response_bytes=256)
                served.append(ch.serve(lambda req: req.upper()))

            self.assertEqual(run_ranks(self, request, respond), [], provider)
            self.assertEqual(answers, [f"REQUEST {i}".encode() for i in range(100)] + [b""])
            self.assertEqual(served, [101])

    def test_a_handler_that_raises_stops_serve_with_its_exception(self):
        def request(rank):
            ch = fabflow.Requester(rank, provider="local", request_bytes=64, response_bytes=8,
                                   timeout=5)
            self.assertEqual(ch.call(b"ab"), b"AB")
            self.assertEqual(ch.call(b"too long"), b"")  # refused: serve() stopped
            self.assertEqual(ch.call(b"boom"), b"")  # the handler raised: serve() stopped

        raised = []

        def respond(rank):
            ch = fabflow.Responder(rank, provider="local", request_bytes=64, response_bytes=8)
            with self.assertRaisesRegex(fabflow.Error, "handler answered 16 bytes; this channel "
                                                        "takes up to 8"):
                ch.serve(lambda req: req.upper() * 2 if req == b"too long" else req.upper())
            try:
                ch.serve(lambda req: 1 // 0)
            except ZeroDivisionError:
                raised.append(True)

        self.assertEqual(run_ranks(self, request, respond), [])
        self.assertEqual(raised, [True])


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class BulkTest(unittest.TestCase):
    def test_send_and_receive_in_place_on_local_and_shm(self):
        size = 3 << 20
        for provider in PROVIDERS:
            data = bytes(range(256)) * (size // 256)
            got = []

            def sender(rank):
                ch = fabflow.Bulk(rank, provider=provider)
                self.assertEqual(ch.send(data, 1, tag=7), size)
                reqs = [ch.isend(memoryview(data)[: 1000 * (i + 1)], 1, tag=i) for i in range(4)]
                for r in reqs:
                    r.wait()
                self.assertTrue(all(r.done for r in reqs))
                ch.close()

            def receiver(rank):
                ch = fabflow.Bulk(rank, provider=provider)
                buf = bytearray(size)
                self.assertEqual(ch.recv_into(buf, 0, tag=7), size)
                got.append(buf == data)
                bufs = [bytearray(4000) for _ in range(4)]
                reqs = [ch.irecv(bufs[i], 0, tag=i) for i in reversed(range(4))]
                while not all(r.test() for r in reqs):
                    pass
                got.append([r.wait() for r in reversed(reqs)] == [1000, 2000, 3000, 4000])
                got.append(all(bufs[i][: 1000 * (i + 1)] == data[: 1000 * (i + 1)]
                               for i in range(4)))
                with self.assertRaisesRegex(fabflow.Error, "needs a writable buffer"):
                    ch.recv_into(bytes(10), 0)
                with self.assertRaisesRegex(fabflow.Error, "takes a buffer .* not list"):
                    ch.recv_into([0] * 10, 0)
                with self.assertRaisesRegex(fabflow.Error, "peer must be another rank"):
                    ch.recv_into(bytearray(10), 1)
                with self.assertRaisesRegex(fabflow.Error, "tag must be"):
                    ch.isend(b"x", 0, tag=-1)
                ch.close()

            self.assertEqual(run_ranks(self, sender, receiver), [], provider)
            self.assertEqual(got, [True, True, True], provider)

    def test_ctrl_c_interrupts_a_waiting_receive(self):
        ranks = fabflow.thread_ranks(2)
        opened, done, errors = threading.Event(), threading.Event(), []

        def sender():
            try:
                ch = fabflow.Bulk(ranks[0], provider="local")
                opened.set()
                done.wait(30)
                ch.close()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=sender)
        t.start()
        ch = fabflow.Bulk(ranks[1], provider="local", timeout=None)
        opened.wait(30)
        threading.Timer(0.3, _thread.interrupt_main).start()
        start = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            ch.recv_into(bytearray(1000), 0)
        self.assertLess(time.monotonic() - start, 5)
        done.set()
        ch.close()
        t.join(30)
        self.assertEqual(errors, [])

    def test_a_message_longer_than_the_buffer_fails_in_one_line(self):
        def sender(rank):
            ch = fabflow.Bulk(rank, provider="local", timeout=3)
            try:
                ch.send(bytes(100000), 1)
            except fabflow.Error:
                pass  # the receiver's channel failed: the sender may see it or not

        def receiver(rank):
            ch = fabflow.Bulk(rank, provider="local", timeout=3)
            with self.assertRaisesRegex(fabflow.Error, "100000"):
                ch.recv_into(bytearray(1000), 0)

        errors = run_ranks(self, sender, receiver)
        self.assertEqual([e for e in errors if not isinstance(e, fabflow.Error)], [])


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class StoreTest(unittest.TestCase):
    def test_get_put_delete_on_local_and_shm(self):
        for provider in PROVIDERS:
            seen, stats = [], []

            def client(rank):
                kv = fabflow.KVClient(rank, provider=provider, value_bytes=32)
                rank.barrier()  # the server has loaded and started
                seen.append(kv.get("sensor-1"))
                seen.append(kv.put(b"sensor-2", b"b" * 32))
                seen.append(kv.get(b"sensor-2"))
                seen.append(kv.delete("sensor-1"))
                seen.append(kv.get("sensor-1"))
                seen.append(kv.delete("sensor-1"))
                for bad, message in (("k" * 17, "at most 16 bytes"),):
                    with self.assertRaisesRegex(fabflow.Error, message):
                        kv.get(bad)
                with self.assertRaisesRegex(fabflow.Error, "a value is 32 bytes"):
                    kv.put("x", b"short")
                kv.close()

            def server(rank):
                kv = fabflow.KVServer(rank, provider=provider, value_bytes=32)
                self.assertEqual(kv.load("sensor-1", b"a" * 32), "ok")
                kv.start()
                rank.barrier()
                stats.append(kv.wait(timeout=30))

            self.assertEqual(run_ranks(self, client, server), [], provider)
            self.assertEqual(seen, [b"a" * 32, True, b"b" * 32, True, None, False], provider)
            self.assertEqual(stats[0]["items"], 1, provider)

    def test_info_lists_the_providers(self):
        info = fabflow.info()
        self.assertEqual(info["fabflow"], fabflow.version())
        names = [p["provider"] for p in info["providers"]]
        self.assertIn("shm", names)
        self.assertTrue(all({"endpoint", "inject_size", "rma", "ops"} <= set(p)
                            for p in info["providers"]))


if __name__ == "__main__":
    unittest.main()
