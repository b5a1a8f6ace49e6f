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

from .fabflow_under_test import BUILD, CLI, RANK_ENV, fabflow, run_ranks


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
