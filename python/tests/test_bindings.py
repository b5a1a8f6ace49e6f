"""Tests of the fabflow Python package: flow queues between two thread ranks and between two
processes started by `fabflow launch`, errors as fabflow.Error, and fabflow.results.load.
Which package they run against: fabflow_under_test.py.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from .fabflow_under_test import BUILD, CLI, RANK_ENV, REPO, fabflow, run_ranks


def item(i):
    """Item i of the test stream: its length and bytes follow from i alone."""
    return bytes((i * 7 + j) & 0xFF for j in range(1 + i % 50))


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class BindingsTest(unittest.TestCase):
    def pair(self, producer_body, consumer_body):
        """Runs the two bodies on two thread ranks; returns their exceptions."""
        return run_ranks(self, producer_body, consumer_body)

    def test_a_queue_moves_every_item_in_order(self):
        for provider in ("local", "shm", "tcp"):
            got, why = [], []

            def produce(rank):
                q = fabflow.Producer(rank, peer=1, provider=provider, item_bytes=64)
                why.append(q.why)
                for i in range(300):
                    data = item(i)
                    q.enqueue(data if i % 3 == 0 else bytearray(data) if i % 3 == 1
                              else memoryview(data))
                q.close()

            def consume(rank):
                got.extend(fabflow.Consumer(rank, peer=0, provider=provider, item_bytes=64))

            self.assertEqual(self.pair(produce, consume), [], provider)
            self.assertEqual(got, [item(i) for i in range(300)], provider)
            self.assertIn("auto on", why[0])

    def test_errors_are_fabflow_errors(self):
        rank = fabflow.thread_ranks(1)[0]
        with self.assertRaisesRegex(fabflow.Error, "unknown design 'fast'"):
            fabflow.Producer(rank, peer=1, design="fast")
        with self.assertRaisesRegex(fabflow.Error, "not started as a rank"):
            env = dict(os.environ)
            for k in [k for k in env if k.startswith(("FABFLOW_", "SLURM_", "OMPI_", "PMI"))]:
                del os.environ[k]
            try:
                fabflow.Rank()
            finally:
                os.environ.update(env)

    def test_a_buffer_that_is_not_contiguous_is_refused_and_the_queue_goes_on(self):
        def produce(rank):
            q = fabflow.Producer(rank, peer=1, provider="local", item_bytes=16)
            with self.assertRaisesRegex(fabflow.Error, "contiguous"):
                q.enqueue(memoryview(b"abcdefgh")[::2])
            q.enqueue(b"aceg")
            q.close()

        got = []

        def consume(rank):
            got.extend(fabflow.Consumer(rank, peer=0, provider="local", item_bytes=16))

        self.assertEqual(self.pair(produce, consume), [])
        self.assertEqual(got, [b"aceg"])

    def test_two_processes_under_fabflow_launch(self):
        exe = CLI
        if not os.path.exists(exe):
            self.skipTest(f"no {exe}")
        script = textwrap.dedent("""
            import fabflow
            r = fabflow.Rank()
            if r.rank == 0:
                q = fabflow.Producer(r, peer=1, item_bytes=128)
                for i in range(500):
                    q.enqueue(i.to_bytes(8, "little") * 4)
                q.close()
                print("sent 500", q.why.split(" (")[0])
            else:
                items = list(fabflow.Consumer(r, peer=0, item_bytes=128))
                ok = items == [i.to_bytes(8, "little") * 4 for i in range(500)]
                print("got", len(items), "intact" if ok else "damaged")
            """)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ranks.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(script)
            r = subprocess.run([exe, "launch", "-n", "2", "--", sys.executable, path], env=RANK_ENV,
                               capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[0] sent 500 auto on ", r.stdout)
        self.assertIn("[1] got 500 intact", r.stdout)


def launch(script_or_args, timeout=120):
    """Runs two ranks of a Python program under fabflow launch: the completed process."""
    args = script_or_args if isinstance(script_or_args, list) else None
    with tempfile.TemporaryDirectory() as d:
        if args is None:
            path = os.path.join(d, "ranks.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(script_or_args))
            args = [path]
        return subprocess.run([CLI, "launch", "-n", "2", "--", sys.executable] + args,
                              env=RANK_ENV, capture_output=True, text=True, timeout=timeout,
                              check=False)


@unittest.skipIf(fabflow is None or not os.path.exists(CLI), f"no fabflow module or no {CLI}")
class LaunchTest(unittest.TestCase):
    def test_a_peer_that_dies_is_a_fabflow_error_not_a_crash(self):
        r = launch("""
            import os, fabflow
            r = fabflow.Rank()
            if r.rank == 1:
                fabflow.Consumer(r, peer=0, provider="shm", item_bytes=64)
                os._exit(3)
            q = fabflow.Producer(r, peer=1, provider="shm", item_bytes=64, timeout=20)
            try:
                for i in range(1_000_000):
                    q.enqueue(bytes(64))
                print("no error")
            except fabflow.Error as e:
                print("caught:", e)
            """)
        self.assertIn("[0] caught: fabflow: enqueue: ", r.stdout, r.stderr)
        self.assertIn("rank 1", r.stdout)
        self.assertNotEqual(r.returncode, 0)  # rank 1 exited with 3

    def test_the_examples_run_under_fabflow_launch(self):
        try:
            import numpy  # noqa: F401
        except ImportError:
            self.skipTest("no numpy")
        examples = os.path.join(REPO, "examples", "python")
        for args, wants in (
                (["pipeline.py", "--items", "30000"], ["[1] consumer: 30000 items received",
                                                       "matches the producer's"]),
                (["pipeline.py", "--items", "5000", "-p", "shm"], ["matches the producer's"]),
                (["rpc_echo.py", "-n", "300"], ["[0] client: 300 echoes checked",
                                                "[1] server: 300 requests served"]),
                (["bulk_array.py", "--mib", "16"], ["[1] receiver: 16 MiB received in place",
                                                    "as expected"])):
            r = launch([os.path.join(examples, args[0])] + args[1:])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for want in wants:
                self.assertIn(want, r.stdout, args)


@unittest.skipIf(fabflow is None, f"no fabflow module built in {BUILD}")
class ResultsTest(unittest.TestCase):
    def test_load_reads_json_lines_and_refuses_others(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"bench": "raw", "size": 64}) + "\n\n")
                f.write(json.dumps({"bench": "raw", "size": 4096}) + "\n")
            rows = fabflow.results.load(path, frame=False)
            self.assertEqual([r["size"] for r in rows], [64, 4096])
            with open(path, "a", encoding="utf-8") as f:
                f.write("[1, 2]\n")
            with self.assertRaisesRegex(ValueError, "rows.jsonl:4: not a JSON object"):
                fabflow.results.load(path, frame=False)


if __name__ == "__main__":
    unittest.main()
