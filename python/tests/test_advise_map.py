"""Tests of the advise map (`fabflow advise FAMILY --map BASE`, python/fabflow_plot/advise_map.py):
a grid with a clear winner, a tie and a failed cell is drawn with one colour per design, ties
hatched; maps that are not maps are refused in one line.

Run from the repository root:
    python3 -m unittest discover -s python/tests -t python
"""

import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from fabflow_plot import advise_map as AM  # noqa: E402
from fabflow_plot import cli  # noqa: E402
from fabflow_plot import data as D  # noqa: E402

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def answer(winner, ties=0, provider="local"):
    ranked = [{"provider": provider, "design": winner, "median": 10.0, "status": "winner"}]
    ranked += [{"provider": provider, "design": f"other{i}", "median": 9.9, "status": "tied"}
               for i in range(ties)]
    return {"type": "advice", "winner": f"{provider}:{winner}", "ranked": ranked,
            "ties": [f"{provider}:other{i}" for i in range(ties)]}


def grid():
    return {"type": "advice_map", "family": "queue", "providers": "local",
            "sizes": ["64", "4K"], "objectives": ["throughput", "p99"], "cell_budget_s": 10,
            "cells": [
                {"size": "64", "objective": "throughput", "answer": answer("push1-watermark-pull")},
                {"size": "64", "objective": "p99", "answer": answer("push2-event-pull", ties=2)},
                {"size": "4K", "objective": "throughput", "answer": answer("push1-watermark-pull")},
                {"size": "4K", "objective": "p99", "answer": {"failed": "every design refused"}},
            ]}


def vcell(size, capacity, a):
    return {"size": size, "objective": "throughput", "vary": capacity, "answer": a}


def varied():
    """A map of sizes against the values of --capacity, for throughput."""
    cell = vcell
    return {"type": "advice_map", "family": "queue", "providers": "local",
            "sizes": ["64", "4K"], "objectives": ["throughput"],
            "vary": {"flag": "--capacity", "values": ["16", "1024"]}, "cell_budget_s": 10,
            "cells": [cell("64", "16", answer("push1-push-push")),
                      cell("64", "1024", answer("push1-watermark-pull")),
                      cell("4K", "16", answer("push1-push-push")),
                      cell("4K", "1024", answer("pull-pull-pull", ties=1))]}


class AdviseMapTest(unittest.TestCase):
    def write(self, d, m, name="map.json"):
        path = os.path.join(d, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(m, f)
        return path

    def test_winners_ties_and_failed_cells(self):
        m = grid()
        winners = [AM.winner_of(c["answer"]) for c in m["cells"]]
        self.assertEqual(winners[0], ("push1-watermark-pull", "local", 0))
        self.assertEqual(winners[1], ("push2-event-pull", "local", 2))
        self.assertIsNone(winners[3])
        self.assertIsNone(AM.winner_of({"winner": None, "ranked": []}))

    def test_cells_drawn_colour_by_winner_and_hatch_ties(self):
        drawn, designs, colour = AM.cells_drawn(grid())
        self.assertEqual(designs, ["push1-watermark-pull", "push2-event-pull"])
        by_place = {(row, col): (face, hatch, label) for row, col, face, hatch, label in drawn}
        self.assertEqual(len(by_place), 4)
        self.assertEqual(by_place[(0, 0)][0], by_place[(1, 0)][0])  # one design, one colour
        self.assertNotEqual(by_place[(0, 0)][0], by_place[(0, 1)][0])
        self.assertIsNone(by_place[(0, 0)][1])
        self.assertEqual(by_place[(0, 1)][1], AM._TIED_HATCH)
        self.assertIn("tied with 2", by_place[(0, 1)][2])
        self.assertEqual(by_place[(1, 1)][0], AM._FAILED)
        self.assertIn("every design refused", by_place[(1, 1)][2])

    def test_a_varied_flag_makes_the_columns(self):
        with tempfile.TemporaryDirectory() as d:
            m = AM.load(self.write(d, varied()))
        self.assertEqual(AM.columns(m), ["16", "1024"])
        drawn, designs, _ = AM.cells_drawn(m)
        by_place = {(row, col): label for row, col, _, _, label in drawn}
        self.assertEqual(by_place[(0, 0)], "push1-push-push")
        self.assertEqual(by_place[(0, 1)], "push1-watermark-pull")
        self.assertIn("pull-pull-pull", by_place[(1, 1)])
        self.assertEqual(designs, ["push1-push-push", "push1-watermark-pull", "pull-pull-pull"])
        bad = varied()
        bad["cells"][0]["vary"] = "64"  # not one of the values
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(D.FabflowError):
                AM.load(self.write(d, bad))
            with self.assertRaises(D.FabflowError):
                AM.load(self.write(d, {**varied(), "vary": {"flag": "--capacity", "values": []}}))

    def test_one_colour_per_design(self):
        few = AM.colours(["a", "b", "c"])
        self.assertEqual(len(set(few.values())), 3)
        if HAVE_MATPLOTLIB:
            many = AM.colours([f"d{i}" for i in range(14)])
            self.assertEqual(len(set(many.values())), 14)

    def test_maps_that_are_not_maps_are_refused(self):
        with tempfile.TemporaryDirectory() as d:
            bad = grid()
            bad["cells"][0]["size"] = "16K"  # not on the grid
            for m in ({"type": "advice"}, {**grid(), "sizes": []}, bad):
                with self.assertRaises(D.FabflowError):
                    AM.load(self.write(d, m))
            path = os.path.join(d, "broken.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write("{not json")
            with self.assertRaises(D.FabflowError):
                AM.load(path)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(cli.main(["advise-map", path]), 1)
            self.assertEqual(len(err.getvalue().strip().splitlines()), 1, err.getvalue())

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_draws_png_and_svg(self):
        for m in (grid(), varied()):
            self.draws(m)

    def draws(self, m):
        with tempfile.TemporaryDirectory() as d:
            path = self.write(d, m)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(cli.main(["advise-map", path, "--out", os.path.join(d, "m")]), 0)
            written = out.getvalue().split()
            self.assertEqual(written, [os.path.join(d, "m.png"), os.path.join(d, "m.svg")])
            for f in written:
                self.assertGreater(os.path.getsize(f), 1000)


if __name__ == "__main__":
    unittest.main()
