"""Tests of fabflow_plot: claim checks, filtering and aggregation, the command line.

Run from the repository root:
    python3 -m unittest discover -s python/tests -t python
Tests that draw figures are skipped when matplotlib cannot be imported.
"""

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from fabflow_plot import claims as C  # noqa: E402
from fabflow_plot import cli  # noqa: E402
from fabflow_plot import data as D  # noqa: E402
from fabflow_plot import distribution as DIST  # noqa: E402

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def queue_rows():
    """Two designs at three sizes, two repeats each, plus refused rows."""
    rows = []
    values = {"push1-watermark-pull": (800, 900), "push1-push-pull": (600, 640)}
    for rep in range(2):
        for size, factor in ((64, 1), (4096, 10), (65536, 50)):
            for design, ys in values.items():
                rows.append({"type": "throughput", "design": design, "item_bytes": size,
                             "MBps": ys[rep] * factor, "point.-S": str(size),
                             "ops_per_item": {"transfer_notify": 0.0 if "watermark" in design else 1.0},
                             "repeat_index": rep})
            rows.append({"type": "throughput", "design": "push1-pull-pull", "item_bytes": size,
                         "unsupported": "the provider has no read", "repeat_index": rep})
    rows.append({"type": "reference", "MBps": 1.0, "design": "push1-push-pull", "item_bytes": 64})
    return rows


def header(entry, **extra):
    out = {"type": "experiment", "id": entry["id"], "entry": entry, "provider": "shm",
           "quick": True, "repeat": 2, "command_lines": ["build/fabflow bench queue -p shm --json"],
           "environment": {"cpu_model": "Test CPU 3000", "kernel": "6.1"}}
    out.update(extra)
    return out


def queue_entry(check=None, **plot):
    entry = {"id": "003-test", "title": "Throughput test", "caption": "A caption.",
             "bench": "queue", "args": {"--items": "100"},
             "sweep": [{"flag": "-S", "values": ["64", "4K", "64K"]}],
             "rows": {"type": "throughput"},
             "plot": {"kind": "line", "x": "item_bytes", "y": "MBps", "series": ["design"],
                      "xlabel": "item size (bytes)", "ylabel": "MB/s", "logx": True},
             "fidelity": {"kind": "faithful", "note": "fewer items than the paper"},
             "claim": {"text": "Watermark is faster.",
                       "paper": {"place": "Sec. 6.1, L617", "quote": "Watermark wins."},
                       "check": check or {"kind": "greater", "y": "MBps",
                                          "better": {"design": "*-watermark-*"},
                                          "worse": {"design": "push1-push-pull"}}}}
    entry["plot"].update(plot)
    return entry


def write_jsonl(path, head, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(head) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")


def data_rows():
    """queue_rows() after the entry's filter, as the claims see them."""
    exp = D.Experiment(path="x.jsonl", header=header(queue_entry()), rows=queue_rows())
    return D.select_rows(exp)[0]


def check(kind_fields, rows=None, series=("design",), x="item_bytes"):
    entry = {"claim": {"text": "t", "check": kind_fields}}
    return C.evaluate(entry, data_rows() if rows is None else rows, x, list(series))


class FieldAndFilterTest(unittest.TestCase):
    def test_nested_and_flattened_fields(self):
        row = {"latency_ns": {"p50": 5}, "point.-S": "64", "point": {"-S": "64"}}
        self.assertEqual(D.get_field(row, "latency_ns.p50"), 5)
        self.assertEqual(D.get_field(row, "point.-S"), "64")
        self.assertIsNone(D.get_field(row, "latency_ns.p99"))

    def test_value_matching(self):
        self.assertTrue(D.value_matches("push1-watermark-pull", "*-watermark-*"))
        self.assertFalse(D.value_matches("push1-push-pull", "*-watermark-*"))
        self.assertTrue(D.value_matches("SendSend", ["WriteWrite", "Send*"]))
        self.assertTrue(D.value_matches(64, 64))
        self.assertTrue(D.value_matches("64", 64))
        self.assertTrue(D.value_matches(64, "64"))
        self.assertFalse(D.value_matches(1, True))
        self.assertTrue(D.value_matches(None, None))

    def test_rows_filter_and_refused(self):
        exp = D.Experiment(path="x.jsonl", header=header(queue_entry()), rows=queue_rows())
        kept, refused = D.select_rows(exp)
        self.assertEqual(len(kept), 12)
        self.assertEqual(len(refused), 6)
        self.assertTrue(all(r["type"] == "throughput" for r in kept))

    def test_aggregation_median_min_max(self):
        rows = [{"s": "a", "x": 1, "y": v} for v in (3.0, 1.0, 2.0)]
        rows += [{"s": "b", "x": "2", "y": 10}, {"s": "b", "x": 2, "y": 20}]
        points, numeric, x_order, series, skipped = D.aggregate(rows, "x", "y", ["s"], scale=2.0)
        self.assertTrue(numeric)
        self.assertEqual(x_order, [1.0, 2.0])
        self.assertEqual(series, [("a",), ("b",)])
        self.assertEqual(skipped, 0)
        a, b = points
        self.assertEqual((a.median, a.low, a.high, a.n), (4.0, 2.0, 6.0, 3))
        self.assertEqual((b.median, b.low, b.high, b.n), (30.0, 20.0, 40.0, 2))

    def test_categorical_x_keeps_first_seen_order(self):
        rows = [{"x": "WriteWrite", "y": 1}, {"x": "SendSend", "y": 2}, {"x": "WriteWrite", "y": 3}]
        points, numeric, x_order, _, _ = D.aggregate(rows, "x", "y", [])
        self.assertFalse(numeric)
        self.assertEqual(x_order, ["WriteWrite", "SendSend"])
        self.assertEqual(points[0].median, 2.0)

    def test_linear_ticks_have_no_offset(self):
        self.assertEqual([D.format_tick(v) for v in (0, 0.25, 999, 2500, 12e6, 1.5e9)],
                         ["0", "0.25", "999", "2.5k", "12M", "1.5G"])

    def test_series_labels_read_as_text_not_json(self):
        fields = ("design", "preset")
        self.assertEqual(D.series_label(("socket", None), fields), "socket")
        self.assertEqual(D.series_label(("push1-watermark-pull", "datamover"), fields),
                         "push1-watermark-pull, datamover")
        self.assertEqual(D.series_label((True,), ("active_consumer",)), "active consumer")
        self.assertEqual(D.series_label((False,), ("active_consumer",)), "no active consumer")
        self.assertEqual(D.series_label((65536,), ("item_bytes",)), "64KB")
        self.assertEqual(D.series_label(("4K",), ("point.-S",)), "4KB")
        self.assertEqual(D.series_label((None,), ("preset",)), "all")
        self.assertEqual(D.field_title(("design", "item_bytes", "point.--active-consumer")),
                         "design, size, --active-consumer")
        # Claim details keep the rows' own values.
        self.assertEqual(D.series_label(("socket", None)), "socket, null")
        self.assertEqual(D.series_label((True,)), "true")

    def test_size_text_and_labels(self):
        self.assertEqual(D.to_number("4K", size=True), 4096.0)
        self.assertIsNone(D.to_number("4K"))
        self.assertEqual([D.format_size(v) for v in (64, 1024, 65536, 1 << 20)], ["64", "1K", "64K", "1M"])
        rows = [{"point.-S": s, "y": 1} for s in ("64", "1K")]
        _, numeric, x_order, _, _ = D.aggregate(rows, "point.-S", "y", [])
        self.assertTrue(numeric)
        self.assertEqual(x_order, [64.0, 1024.0])

    def test_prepare_with_repeats(self):
        exp = D.Experiment(path="x.jsonl", header=header(queue_entry()), rows=queue_rows())
        pdata = D.prepare(exp)
        self.assertEqual(len(pdata.points), 6)
        first = pdata.points[0]
        self.assertEqual((first.series, first.x), (("push1-watermark-pull",), 64.0))
        self.assertEqual((first.median, first.low, first.high, first.n), (850.0, 800.0, 900.0, 2))
        self.assertEqual(len(pdata.refused), 3)
        self.assertEqual(pdata.refused[0].count, 2)


class ClaimTest(unittest.TestCase):
    def test_y_divide_by(self):
        rows = [{"pattern": p, "response_bytes": b, "ir": ir}
                for p, b, ir in (("A", 64, 6400), ("A", 4096, 40960), ("B", 64, 640),
                                 ("B", 4096, 4096), ("B", 8192, 0))]
        rows.append({"pattern": "B", "response_bytes": 0, "ir": 5})  # no bytes: left out
        points, _, _, _, skipped = D.aggregate(rows, "response_bytes", "ir", ["pattern"],
                                               divide_by="response_bytes")
        per_byte = {(p.series[0], p.x): p.median for p in points}
        self.assertEqual(per_byte[("A", 64)], 100.0)
        self.assertEqual(per_byte[("A", 4096)], 10.0)
        self.assertEqual(per_byte[("B", 8192)], 0.0)
        self.assertEqual(skipped, 1)
        entry = {"claim": {"text": "per byte falls", "check": {
            "kind": "trend", "y": "ir", "y_divide_by": "response_bytes",
            "where": {"pattern": "A"}, "direction": "decreasing", "tolerance": 0.5}}}
        verdict = C.evaluate(entry, rows, "response_bytes", ["pattern"])
        self.assertEqual(verdict.verdict, "holds here", verdict.detail)

    def assertVerdict(self, verdict, expected, *fragments):
        self.assertEqual(verdict.verdict, expected, verdict.detail)
        for fragment in fragments:
            self.assertIn(fragment, verdict.detail)

    def test_at_most(self):
        fields = {"kind": "at_most", "y": "ops_per_item.transfer_notify", "where": {"design": "*-watermark-*"}}
        self.assertVerdict(check(dict(fields, value=0.0)), C.HOLDS, "are <= 0.0")
        fields["where"] = {}
        self.assertVerdict(check(dict(fields, value=0.5)), C.FAILS, "3 of 6", "1.0 at design=push1-push-pull, x=64")

    def test_at_least(self):
        fields = {"kind": "at_least", "y": "MBps", "where": {"design": "push1-push-pull"}}
        self.assertVerdict(check(dict(fields, value=600)), C.HOLDS, "smallest 620.0")
        self.assertVerdict(check(dict(fields, value=1000)), C.FAILS, "below 1000.0")

    def test_greater(self):
        fields = {"kind": "greater", "y": "MBps", "better": {"design": "*-watermark-*"},
                  "worse": {"design": "push1-push-pull"}}
        self.assertVerdict(check(fields), C.HOLDS,
                           "at x=64: min over better 850.0 > 1.0 x max over worse 620.0",
                           "at x=64K")
        self.assertVerdict(check(dict(fields, factor=1.4)), C.FAILS, "is not > 1.4 x")
        self.assertVerdict(check(dict(fields, factor=1.4, at="some_x")), C.FAILS)
        self.assertVerdict(check(dict(fields, factor=1.2, at="largest_x")), C.HOLDS, "at x=64K")

    def test_greater_at_one_x(self):
        rows = [{"d": "a", "x": 1, "y": 10}, {"d": "b", "x": 1, "y": 5},
                {"d": "a", "x": 2, "y": 10}, {"d": "b", "x": 2, "y": 20}]
        fields = {"kind": "greater", "y": "y", "better": {"d": "a"}, "worse": {"d": "b"}}
        self.assertVerdict(check(fields, rows, ["d"], "x"), C.FAILS)
        self.assertVerdict(check(dict(fields, at="some_x"), rows, ["d"], "x"), C.HOLDS)
        self.assertVerdict(check(dict(fields, at="smallest_x"), rows, ["d"], "x"), C.HOLDS, "at x=1:")
        self.assertVerdict(check(dict(fields, at="largest_x"), rows, ["d"], "x"), C.FAILS, "at x=2:")

    def test_less(self):
        rows = [{"p": "WriteWrite", "x": 64, "lat": {"p50": 2}},
                {"p": "SendSend", "x": 64, "lat": {"p50": 3}},
                {"p": "WriteSend", "x": 64, "lat": {"p50": 2.5}}]
        fields = {"kind": "less", "y": "lat.p50", "better": {"p": "WriteWrite"},
                  "worse": {"p": ["SendSend", "WriteSend"]}}
        self.assertVerdict(check(fields, rows, ["p"], "x"), C.HOLDS,
                           "max over better 2.0 < 1.0 x min over worse 2.5")
        self.assertVerdict(check(dict(fields, factor=0.5), rows, ["p"], "x"), C.FAILS, "is not <")

    def test_comparison_when_where_selects_x(self):
        rows = [{"p": "WriteWrite", "y": 2}, {"p": "SendSend", "y": 3}]
        fields = {"kind": "less", "y": "y", "better": {"p": "WriteWrite"}, "worse": {"p": "SendSend"}}
        self.assertVerdict(check(fields, rows, [], "p"), C.HOLDS, "share no x")

    def test_trend(self):
        fields = {"kind": "trend", "y": "MBps", "direction": "increasing"}
        self.assertVerdict(check(fields), C.HOLDS, "design=push1-push-pull: 620.0 at x=64 -> 31000.0 at x=64K")
        self.assertVerdict(check(dict(fields, direction="decreasing")), C.FAILS, "not decreasing")
        self.assertVerdict(check(dict(fields, tolerance=100.0)), C.FAILS, "by more than")

    def test_trend_flat_fails_and_single_x_is_unmeasurable(self):
        rows = [{"x": 1, "y": 5}, {"x": 2, "y": 5}]
        self.assertVerdict(check({"kind": "trend", "y": "y", "direction": "increasing"}, rows, [], "x"),
                           C.FAILS, "+0.0%")
        self.assertVerdict(check({"kind": "trend", "y": "y", "direction": "increasing"}, rows[:1], [], "x"),
                           C.UNMEASURABLE, "two x values")

    def test_greater_from_x_min(self):
        rows = [{"d": "a", "x": 1, "y": 5}, {"d": "b", "x": 1, "y": 10},
                {"d": "a", "x": 4, "y": 20}, {"d": "b", "x": 4, "y": 10},
                {"d": "a", "x": 8, "y": 30}, {"d": "b", "x": 8, "y": 10}]
        fields = {"kind": "greater", "y": "y", "better": {"d": "a"}, "worse": {"d": "b"}}
        self.assertVerdict(check(fields, rows, ["d"], "x"), C.FAILS)
        self.assertVerdict(check(dict(fields, x_min=4), rows, ["d"], "x"), C.HOLDS, "x >= 4: at x=4:")
        self.assertVerdict(check(dict(fields, x_max=2), rows, ["d"], "x"), C.FAILS, "x <= 2: at x=1:")
        self.assertVerdict(check(dict(fields, x_min=16), rows, ["d"], "x"), C.UNMEASURABLE, "no x x >= 16")

    def reuse_rows(self):
        """leave-pinned catches the pipeline between reuse 32 and 64; caching at 2."""
        lp = {1: 100, 2: 150, 4: 250, 8: 400, 16: 600, 32: 800, 64: 1200, 128: 1300}
        cp = {1: 900, 2: 1050, 4: 1150, 8: 1200, 16: 1250, 32: 1300, 64: 1300, 128: 1300}
        rows = []
        for reuse in lp:
            rows += [{"protocol": "leave-pinned", "reuse": reuse, "bw": lp[reuse]},
                     {"protocol": "pipeline", "reuse": reuse, "bw": 1000},
                     {"protocol": "caching-pipeline", "reuse": reuse, "bw": cp[reuse]}]
        return rows

    def test_crossover(self):
        rows = self.reuse_rows()
        fields = {"kind": "crossover", "y": "bw", "rising": {"protocol": "leave-pinned"},
                  "reference": {"protocol": "pipeline"}}
        # 800 -> 1200 around 1000: halfway, at 32 * 2 ** 0.5 on the log scale.
        self.assertVerdict(check(fields, rows, ["protocol"], "reuse"), C.HOLDS, "about x=45.25")
        self.assertVerdict(check(dict(fields, within=[30, 60]), rows, ["protocol"], "reuse"),
                           C.HOLDS, "within [30.0, 60.0]")
        self.assertVerdict(check(dict(fields, within=[2, 16]), rows, ["protocol"], "reuse"),
                           C.FAILS, "outside")
        never = [r for r in rows if r["reuse"] <= 16]
        self.assertVerdict(check(fields, never, ["protocol"], "reuse"), C.FAILS,
                           "never reaches", "not by x=16 (600.0 vs 1000.0)")
        already = dict(fields, rising={"protocol": "caching-pipeline"}, within=[1, 2])
        self.assertVerdict(check(already, [r for r in rows if r["reuse"] >= 2], ["protocol"], "reuse"),
                           C.HOLDS, "already at x=2")
        self.assertVerdict(check(dict(fields, within=[1]), rows, ["protocol"], "reuse"),
                           C.UNMEASURABLE, "[low, high]")
        self.assertVerdict(check(dict(fields, rising={"protocol": "none"}), rows, ["protocol"], "reuse"),
                           C.UNMEASURABLE, "matches rising")

    def test_earlier(self):
        rows = self.reuse_rows()
        fields = {"kind": "earlier", "y": "bw", "earlier": {"protocol": "caching-pipeline"},
                  "later": {"protocol": "leave-pinned"}, "reference": {"protocol": "pipeline"}}
        self.assertVerdict(check(fields, rows, ["protocol"], "reuse"), C.HOLDS,
                           "earlier reaches reference about x=1.587", "later about x=45.25")
        swapped = dict(fields, earlier=fields["later"], later=fields["earlier"])
        self.assertVerdict(check(swapped, rows, ["protocol"], "reuse"), C.FAILS)
        never = [r for r in rows if r["reuse"] <= 16]
        self.assertVerdict(check(fields, never, ["protocol"], "reuse"), C.HOLDS, "later not by x=16")
        self.assertVerdict(check(swapped, never, ["protocol"], "reuse"), C.FAILS)

    def test_all(self):
        rows = self.reuse_rows()
        cross = {"kind": "crossover", "y": "bw", "rising": {"protocol": "leave-pinned"},
                 "reference": {"protocol": "pipeline"}, "within": [30, 60]}
        trend = {"kind": "trend", "y": "bw", "where": {"protocol": "leave-pinned"},
                 "direction": "increasing"}
        verdict = check({"kind": "all", "checks": [cross, trend]}, rows, ["protocol"], "reuse")
        self.assertVerdict(verdict, C.HOLDS, "(1) crossover: holds here", "(2) trend: holds here")
        bad = dict(trend, direction="decreasing")
        self.assertVerdict(check({"kind": "all", "checks": [cross, bad]}, rows, ["protocol"], "reuse"),
                           C.FAILS, "(2) trend: does not hold here")
        odd = {"kind": "frobnicate", "y": "bw"}
        self.assertVerdict(check({"kind": "all", "checks": [cross, odd]}, rows, ["protocol"], "reuse"),
                           C.UNMEASURABLE, "unknown check kind")
        self.assertVerdict(check({"kind": "all", "checks": []}, rows, ["protocol"], "reuse"),
                           C.UNMEASURABLE, "non-empty list")

    def test_not_measurable(self):
        self.assertVerdict(check({"kind": "frobnicate", "y": "MBps"}), C.UNMEASURABLE,
                           "unknown check kind 'frobnicate'")
        self.assertVerdict(check({"kind": "at_most", "y": "MBps", "value": 1}, rows=[]),
                           C.UNMEASURABLE, "no data")
        self.assertVerdict(check({"kind": "at_most", "y": "MBps", "value": 1,
                                  "where": {"design": "nothing"}}), C.UNMEASURABLE, "matches where")
        self.assertVerdict(check({"kind": "greater", "y": "MBps", "better": {"design": "nope"},
                                  "worse": {}}), C.UNMEASURABLE, "matches better")
        self.assertVerdict(check({"kind": "at_most", "y": "missing_field", "value": 1}), C.UNMEASURABLE)
        self.assertVerdict(C.evaluate({}, data_rows(), "item_bytes", []), C.UNMEASURABLE, "no claim")

    def test_deterministic(self):
        fields = {"kind": "greater", "y": "MBps", "better": {"design": "*-watermark-*"},
                  "worse": {"design": "push1-push-pull"}}
        self.assertEqual(check(fields), check(fields))


def run_cli(*args):
    """main() in this process; returns (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(list(args))
    return status, out.getvalue(), err.getvalue()


def repeated(values_by_series, x="x"):
    """Rows {design, x, y} with one row per repeat: {design: {x: [y, ...]}}."""
    return [{"design": d, x: xv, "y": y, "repeat_index": i}
            for d, by_x in values_by_series.items() for xv, ys in by_x.items()
            for i, y in enumerate(ys)]


class NoiseTest(unittest.TestCase):
    """A claim holds only beyond the repeats' spread; the medians alone can only refute it."""

    def verdict(self, fields, rows):
        return C.evaluate({"claim": {"text": "t", "check": fields}}, rows, "x", ["design"])

    def test_greater_within_the_spread_is_inconclusive(self):
        fields = {"kind": "greater", "y": "y", "better": {"design": "a"}, "worse": {"design": "b"}}
        apart = repeated({"a": {1: [110, 111, 112]}, "b": {1: [100, 101, 102]}})
        overlap = repeated({"a": {1: [95, 111, 130]}, "b": {1: [90, 101, 115]}})
        below = repeated({"a": {1: [95, 99, 130]}, "b": {1: [90, 101, 115]}})
        self.assertEqual(self.verdict(fields, apart).verdict, C.HOLDS)
        v = self.verdict(fields, overlap)
        self.assertEqual(v.verdict, C.INCONCLUSIVE)
        self.assertIn("within the spread (repeats reach 95.0 against 115.0)", v.detail)
        self.assertEqual(self.verdict(fields, below).verdict, C.FAILS)
        less = dict(fields, kind="less", better={"design": "b"}, worse={"design": "a"})
        self.assertEqual(self.verdict(less, apart).verdict, C.HOLDS)
        self.assertEqual(self.verdict(less, overlap).verdict, C.INCONCLUSIVE)
        # some_x: one clear x suffices; every_x: one contradicted x refutes.
        mixed = apart + repeated({"a": {2: [95, 99, 130]}, "b": {2: [90, 101, 115]}})
        self.assertEqual(self.verdict(fields, mixed).verdict, C.FAILS)
        self.assertEqual(self.verdict(dict(fields, at="some_x"), mixed).verdict, C.HOLDS)

    def test_trend_and_bounds_within_the_spread(self):
        trend = {"kind": "trend", "y": "y", "direction": "increasing", "tolerance": 0.1}
        clear = repeated({"a": {1: [100, 100, 100], 8: [130, 131, 132]}})
        noisy = repeated({"a": {1: [80, 100, 125], 8: [100, 131, 160]}})
        flat = repeated({"a": {1: [80, 100, 125], 8: [100, 105, 160]}})
        self.assertEqual(self.verdict(trend, clear).verdict, C.HOLDS)
        v = self.verdict(trend, noisy)
        self.assertEqual(v.verdict, C.INCONCLUSIVE)
        self.assertIn("only within the spread", v.detail)
        self.assertEqual(self.verdict(trend, flat).verdict, C.FAILS)
        bound = {"kind": "at_most", "y": "y", "value": 120}
        self.assertEqual(self.verdict(bound, repeated({"a": {1: [100, 110, 119]}})).verdict, C.HOLDS)
        self.assertEqual(self.verdict(bound, repeated({"a": {1: [100, 110, 125]}})).verdict,
                         C.INCONCLUSIVE)
        self.assertEqual(self.verdict(bound, repeated({"a": {1: [100, 121, 125]}})).verdict, C.FAILS)
        everything = {"kind": "all", "checks": [dict(bound, value=200), trend]}
        self.assertEqual(self.verdict(everything, noisy).verdict, C.INCONCLUSIVE)

    def test_similar(self):
        fields = {"kind": "similar", "y": "y", "tolerance": 0.2}
        level = repeated({"a": {1: [99, 100, 101]}, "b": {1: [90, 92, 94]}})
        apart = repeated({"a": {1: [99, 100, 101]}, "b": {1: [60, 70, 75]}})
        edge = repeated({"a": {1: [90, 100, 130]}, "b": {1: [80, 85, 90]}})
        self.assertEqual(self.verdict(fields, level).verdict, C.HOLDS)
        v = self.verdict(fields, apart)
        self.assertEqual(v.verdict, C.FAILS)
        self.assertIn("70.0 (design=b) is not within 20% of 100.0 (design=a), 30.0% apart", v.detail)
        self.assertEqual(self.verdict(fields, edge).verdict, C.INCONCLUSIVE)
        self.assertEqual(self.verdict(dict(fields, tolerance=1.5), level).verdict, C.UNMEASURABLE)
        one = repeated({"a": {1: [99, 100, 101]}})
        self.assertEqual(self.verdict(fields, one).verdict, C.UNMEASURABLE)


class DifferTest(unittest.TestCase):
    def verdict(self, fields, rows):
        return C.evaluate({"claim": {"text": "t", "check": fields}}, rows, "x", ["design"])

    def test_differ(self):
        fields = {"kind": "differ", "y": "y", "factor": 1.5}
        apart = repeated({"a": {1: [99, 100, 101]}, "b": {1: [190, 200, 210]}})
        level = repeated({"a": {1: [99, 100, 101]}, "b": {1: [110, 120, 130]}})
        edge = repeated({"a": {1: [80, 100, 140]}, "b": {1: [150, 160, 170]}})
        self.assertEqual(self.verdict(fields, apart).verdict, C.HOLDS)
        v = self.verdict(fields, level)
        self.assertEqual(v.verdict, C.FAILS)
        self.assertIn("is not at least 1.5x apart from", v.detail)
        self.assertEqual(self.verdict(fields, edge).verdict, C.INCONCLUSIVE)
        self.assertEqual(self.verdict(dict(fields, factor=0.5), apart).verdict, C.UNMEASURABLE)


class FidelityTest(unittest.TestCase):
    FIELDS = {"kind": "greater", "y": "MBps", "better": {"design": "*-watermark-*"},
              "worse": {"design": "push1-push-pull"}}

    def verdict(self, kind, fields):
        entry = {"fidelity": {"kind": kind, "note": "n"}, "claim": {"text": "t", "check": fields}}
        return C.evaluate(entry, data_rows(), "item_bytes", ["design"])

    def test_a_substitute_never_says_the_bare_holds(self):
        reverse = dict(self.FIELDS, better=self.FIELDS["worse"], worse=self.FIELDS["better"])
        self.assertEqual(self.verdict("faithful", self.FIELDS).verdict, C.HOLDS)
        self.assertEqual(self.verdict("faithful", reverse).verdict, C.FAILS)
        held = self.verdict("substitute", self.FIELDS)
        self.assertEqual(held.verdict, C.SUBSTITUTE_HOLDS)
        self.assertEqual(held.detail, self.verdict("faithful", self.FIELDS).detail)
        self.assertEqual(self.verdict("substitute", reverse).verdict, C.SUBSTITUTE_FAILS)
        missing = dict(self.FIELDS, better={"design": "nope"})
        self.assertEqual(self.verdict("substitute", missing).verdict, C.UNMEASURABLE)

    def test_a_substitutes_parts_never_say_the_bare_holds_either(self):
        reverse = dict(self.FIELDS, better=self.FIELDS["worse"], worse=self.FIELDS["better"])
        both = {"kind": "all", "checks": [self.FIELDS, reverse]}
        faithful = self.verdict("faithful", both)
        self.assertEqual(faithful.verdict, C.FAILS)
        self.assertIn("(1) greater: holds here: ", faithful.detail)
        self.assertIn("(2) greater: does not hold here: ", faithful.detail)
        substitute = self.verdict("substitute", both)
        self.assertEqual(substitute.verdict, C.SUBSTITUTE_FAILS)
        self.assertIn("(1) greater: substitute holds here: ", substitute.detail)
        self.assertIn("(2) greater: substitute does not hold here: ", substitute.detail)
        self.assertNotIn(": holds here", substitute.detail)
        self.assertNotIn(": does not hold here", substitute.detail)

    def test_kind_defaults_to_faithful_only_when_absent(self):
        self.assertEqual(C.fidelity({}), "faithful")
        self.assertEqual(C.fidelity({"fidelity": {"kind": "substitute"}}), "substitute")


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, entry, rows, **extra):
        path = os.path.join(self.dir, entry["id"] + ".jsonl")
        write_jsonl(path, header(entry, **extra), rows)
        return path

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_figure_end_to_end(self):
        path = self.write(queue_entry(), queue_rows())
        status, out, err = run_cli("figure", path)
        self.assertEqual(status, 0, err)
        result = json.loads(out)
        self.assertEqual(result["id"], "003-test")
        self.assertEqual(result["verdict"], C.HOLDS)
        self.assertIn("min over better 850.0", result["detail"])
        base = os.path.join(self.dir, "003-test")
        with open(base + ".png", "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)
        with open(base + ".svg", encoding="utf-8") as f:
            self.assertIn("<svg", f.read())
        with open(base + ".html", encoding="utf-8") as f:
            page = f.read()
        for fragment in ("data:image/png;base64,", "003-test.svg", "Watermark is faster.",
                         "Watermark wins.", "Sec. 6.1, L617", "Faithful", "fewer items than the paper",
                         "holds here", "Test CPU 3000", "refused: the provider has no read",
                         "A caption.", "bench queue -p shm"):
            self.assertIn(fragment, page)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_figure_bar_table_and_empty(self):
        rows = [{"pattern": p, "model": m, "latency_ns": {"p50": v}}
                for p, v in (("WriteWrite", 2000), ("SendSend", 3000)) for m in ("private", "dispatcher")]
        bar = queue_entry({"kind": "less", "y": "latency_ns.p50", "better": {"pattern": "WriteWrite"},
                           "worse": {"pattern": "SendSend"}},
                          kind="bar", x="pattern", y="latency_ns.p50", series=["model"], y_scale=0.001)
        bar["id"], bar["rows"] = "000-bar", {}
        status, out, err = run_cli("figure", self.write(bar, rows, repeat=1))
        self.assertEqual(status, 0, err)
        self.assertEqual(json.loads(out)["verdict"], C.HOLDS)
        table = dict(bar, id="000-table", plot=dict(bar["plot"], kind="table"))
        status, out, err = run_cli("figure", self.write(table, rows))
        self.assertEqual(status, 0, err)
        with open(os.path.join(self.dir, "000-table.html"), encoding="utf-8") as f:
            self.assertIn("<td class=\"num\">2</td>", f.read())
        empty = dict(bar, id="000-empty", rows={"type": "nothing"})
        status, out, err = run_cli("figure", self.write(empty, rows))
        self.assertEqual(status, 0, err)
        self.assertEqual(json.loads(out)["verdict"], C.UNMEASURABLE)
        with open(os.path.join(self.dir, "000-empty.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_report(self):
        first = queue_entry()
        second = queue_entry({"kind": "mystery"})
        second["id"] = "001-other"
        self.write(first, queue_rows())
        self.write(second, queue_rows())
        status, out, err = run_cli("report", self.dir)
        self.assertEqual(status, 0, err)
        index = os.path.join(self.dir, "index.html")
        self.assertEqual(out.strip(), index)
        with open(index, encoding="utf-8") as f:
            page = f.read()
        for fragment in ("003-test", "001-other", "001-other.html", "unknown check kind &#x27;mystery&#x27;",
                         "data:image/png;base64,", "Test CPU 3000"):
            self.assertIn(fragment, page)
        self.assertLess(page.index('href="#001-other"'), page.index('href="#003-test"'))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "001-other.png")))

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_report_leaves_out_an_unreadable_file_and_still_writes_the_index(self):
        self.write(queue_entry(), queue_rows())
        with open(os.path.join(self.dir, "002-broken.jsonl"), "wb") as f:
            f.write(b'{"type": "experiment"}\n\xff\n')
        status, out, err = run_cli("report", self.dir)
        self.assertEqual(status, 1)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("002-broken.jsonl: not UTF-8 text", err)
        with open(os.path.join(self.dir, "index.html"), encoding="utf-8") as f:
            page = f.read()
        self.assertIn("003-test", page)
        self.assertIn("Not included (unreadable files): 002-broken.jsonl", page)

    def test_malformed_line(self):
        path = self.write(queue_entry(), queue_rows())
        with open(path, "a", encoding="utf-8") as f:
            f.write("{not json\n")
        status, out, err = run_cli("figure", path)
        self.assertEqual(status, 1)
        self.assertEqual(out, "")
        self.assertEqual(len(err.splitlines()), 1)
        self.assertTrue(err.startswith("fabflow: error: "), err)
        self.assertIn(f"{path}:{len(queue_rows()) + 2}:", err)

    def test_other_errors(self):
        status, _, err = run_cli("figure", os.path.join(self.dir, "absent.jsonl"))
        self.assertEqual(status, 1)
        self.assertIn("absent.jsonl", err)
        path = os.path.join(self.dir, "bad.jsonl")
        write_jsonl(path, {"type": "throughput"}, [])
        status, _, err = run_cli("figure", path)
        self.assertEqual(status, 1)
        self.assertIn("bad.jsonl:1:", err)
        status, _, err = run_cli("report", self.dir + "/nothing-here")
        self.assertEqual(status, 1)
        self.assertTrue(err.startswith("fabflow: error: "))

    def test_matplotlib_missing(self):
        path = self.write(queue_entry(), queue_rows())
        code = ("import sys; sys.modules['matplotlib'] = None; "
                "from fabflow_plot.cli import main; sys.exit(main(sys.argv[1:]))")
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, "-c", code, "figure", path],
                              capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(proc.returncode, 3)
        self.assertEqual(proc.stderr.strip(), cli.MISSING_MATPLOTLIB)


def reference_rows(values):
    """The runner's rows of an entry's reference: {design: {size: rate}}, marked as the model's."""
    return [{"type": "model", "model": "pcie", "reference_model": "pcie",
             "reference_label": "PCIe limit (model)", "reference_curve": i, "design": d,
             "item_bytes": x, "MBps": y, "ceiling_ops_per_s": y}
            for i, (d, by_x) in enumerate(values.items()) for x, y in by_x.items()]


class ReferenceTest(unittest.TestCase):
    """A model's series beside the measured rows: drawn, never mixed into the measured points,
    and compared by a claim only where a group names reference_model."""

    MODEL = {"push1-watermark-pull": {64: 5000.0, 4096: 6000.0},
             "push1-push-pull": {64: 100.0, 4096: 200.0}}

    def exp(self, check=None):
        return D.Experiment(path="x.jsonl", header=header(queue_entry(check)),
                            rows=queue_rows() + reference_rows(self.MODEL))

    def test_reference_rows_are_a_series_of_their_own(self):
        pdata = D.prepare(self.exp())
        self.assertFalse(any(D.is_reference(r) for r in pdata.rows))
        self.assertEqual(len(pdata.reference_rows), 4)
        [ref] = [e for e in pdata.extras if e.reference]
        self.assertEqual(ref.label, "PCIe limit (model)")
        self.assertTrue(ref.per_series)
        self.assertEqual(sorted((p.series, p.x, p.median) for p in ref.points),
                         [(("push1-push-pull",), 64.0, 100.0), (("push1-push-pull",), 4096.0, 200.0),
                          (("push1-watermark-pull",), 64.0, 5000.0),
                          (("push1-watermark-pull",), 4096.0, 6000.0)])
        # The measured medians are those of the measured rows alone.
        watermark = [p for p in pdata.points if p.series == ("push1-watermark-pull",) and p.x == 64.0]
        self.assertEqual(watermark[0].median, 850.0)

    def test_a_check_ignores_the_reference_unless_it_names_it(self):
        pdata = D.prepare(self.exp())
        entry = queue_entry()
        plain = C.evaluate(entry, pdata.rows, "item_bytes", ["design"],
                           references=pdata.reference_rows)
        self.assertEqual(plain.verdict, C.HOLDS)
        self.assertIn("min over better 850.0", plain.detail)
        # Measured below the model's limit: holds with these rows, fails against a lower limit.
        below = {"kind": "less", "y": "MBps", "better": {"design": "push1-watermark-pull"},
                 "worse": {"design": "push1-watermark-pull", "reference_model": "pcie"},
                 "at": "smallest_x"}
        verdict = C.evaluate(queue_entry(below), pdata.rows, "item_bytes", ["design"],
                             references=pdata.reference_rows)
        self.assertEqual(verdict.verdict, C.HOLDS, verdict.detail)
        self.assertIn("5000", verdict.detail)
        low = reference_rows({"push1-watermark-pull": {64: 10.0, 4096: 10.0}})
        verdict = C.evaluate(queue_entry(below), pdata.rows, "item_bytes", ["design"], references=low)
        self.assertEqual(verdict.verdict, C.FAILS, verdict.detail)
        # Without the reference's rows the named group has nothing to compare.
        verdict = C.evaluate(queue_entry(below), pdata.rows, "item_bytes", ["design"])
        self.assertEqual(verdict.verdict, C.UNMEASURABLE, verdict.detail)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_figure_and_page_show_the_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "003-test.jsonl")
            write_jsonl(path, header(queue_entry(), reference_command_lines=[
                "fabflow model pcie -o send --transport ud --batch 1 -S 64,4K"]),
                queue_rows() + reference_rows(self.MODEL))
            status, out, err = run_cli("figure", path)
            self.assertEqual(status, 0, err)
            self.assertEqual(json.loads(out)["verdict"], C.HOLDS)
            with open(os.path.join(tmp, "003-test.svg"), encoding="utf-8") as f:
                svg = f.read()
            with open(os.path.join(tmp, "003-test.html"), encoding="utf-8") as f:
                page = f.read()
        self.assertIn("<svg", svg)
        self.assertIn("Reference, computed and not measured: &ldquo;PCIe limit (model)&rdquo;", page)
        self.assertIn("fabflow model pcie -o send --transport ud --batch 1 -S 64,4K", page)


def latency_row(mode, size, buckets, path="fabric"):
    return {"bench": "lat", "type": "latency", "path": path, "provider": "shm", "mode": mode,
            "inject": False, "size_bytes": size,
            "latency_ns": {"p50": 1, "histogram": buckets}}


class DistributionTest(unittest.TestCase):
    """CDF and histogram curves from the log-bucketed histograms of latency rows."""

    def test_cdf_is_cumulative_at_the_upper_edges(self):
        xs, ys = DIST.cdf_points([(100, 110, 1), (110, 120, 2), (200, 220, 1)])
        self.assertEqual(xs, [100, 110, 120, 220])
        self.assertEqual(ys, [0.0, 0.25, 0.75, 1.0])
        self.assertEqual(DIST.cdf_points([]), ([], []))

    def test_histogram_drops_to_zero_across_gaps(self):
        xs, ys = DIST.histogram_points([(100, 110, 1), (110, 120, 1), (200, 220, 2)])
        self.assertEqual(xs, [100, 100, 110, 110, 120, 120, 200, 200, 220, 220])
        self.assertEqual(ys, [0.0, 0.25, 0.25, 0.25, 0.25, 0.0, 0.0, 0.5, 0.5, 0.0])

    def test_rows_with_one_label_are_merged_and_labels_keep_what_varies(self):
        rows = [latency_row("send", 64, [[100, 110, 3]]),
                latency_row("send", 64, [[100, 110, 1], [110, 120, 4]]),  # a repeat
                latency_row("write", 64, [[50, 55, 2]])]
        curves = DIST.merged_buckets(rows, "latency_ns")
        self.assertEqual(curves, {"send": [(100.0, 110.0, 4), (110.0, 120.0, 4)],
                                  "write": [(50.0, 55.0, 2)]})
        rows.append(latency_row("send", 1024, [[1, 2, 1]]))
        self.assertIn("send, 1K B", DIST.merged_buckets(rows, "latency_ns"))

    def test_malformed_buckets_and_files_are_one_error(self):
        with self.assertRaises(D.FabflowError):
            DIST.merged_buckets([latency_row("send", 64, [[10, 5, 1]])], "latency_ns")
        with self.assertRaises(D.FabflowError):
            DIST.merged_buckets([latency_row("send", 64, [["a", 5, 1]])], "latency_ns")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.jsonl")
            with open(path, "w") as f:
                f.write('{"type": "throughput"}\n')
            with self.assertRaises(D.FabflowError):
                DIST.load_rows(path, "latency_ns")
            # Not UTF-8: one error naming the file, not a traceback (issue 44).
            with open(path, "wb") as f:
                f.write(b"\xff\xfe{not text}\n")
            with self.assertRaisesRegex(D.FabflowError, "x.jsonl: not UTF-8 text"):
                DIST.load_rows(path, "latency_ns")

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib not installed")
    def test_render_writes_both_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "lat.jsonl")
            with open(path, "w") as f:
                for row in (latency_row("send", 64, [[100, 110, 3], [400, 440, 1]]),
                            latency_row("block", 64, [[5000, 5500, 4]], path="socket")):
                    f.write(json.dumps(row) + "\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(cli.main(["distribution", path]), 0)
            for name in ("lat-cdf.png", "lat-hist.png", "lat-cdf.svg", "lat-hist.svg"):
                with open(os.path.join(tmp, name), "rb") as f:
                    head = f.read(8)
                if name.endswith(".png"):
                    self.assertEqual(head, PNG_MAGIC)
            self.assertEqual(out.getvalue().split(),
                             [os.path.join(tmp, "lat-cdf.png"), os.path.join(tmp, "lat-hist.png")])


if __name__ == "__main__":
    unittest.main()
