"""Tests of what a reader of the figures and the report index sees (issue 42, item 8): legend
words (plot.labels, plot.names), a second y field (plot.y_extra), colours and line styles
(plot.style, plot.panels), notes for missing series, CDFs split by swept fields, the report's
index table and gathered environment, and the catalogue's plot sections.

Run from the repository root:
    python3 -m unittest discover -s python/tests -t python
Tests that draw are skipped when matplotlib cannot be imported.
"""

import contextlib
import copy
import glob
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

from fabflow_plot import claims as C  # noqa: E402
from fabflow_plot import cli  # noqa: E402
from fabflow_plot import data as D  # noqa: E402
from fabflow_plot import distribution as DIST  # noqa: E402
from fabflow_plot import figure as F  # noqa: E402
from fabflow_plot import page as P  # noqa: E402

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
ROOT = os.path.dirname(PYTHON_DIR)
CATALOGUE = os.path.join(ROOT, "experiments")


def entry(plot, check=None, rows=None, id_="003-test"):
    base = {"kind": "line", "x": "item_bytes", "y": "transfer_ns.p50", "series": ["design"],
            "xlabel": "item size (bytes)", "ylabel": "median transfer time (us)", "logx": True,
            "y_scale": 0.001}
    base.update(plot)
    return {"id": id_, "title": "Transfer time", "caption": "c", "bench": "queue",
            "rows": rows if rows is not None else {"type": "pingpong"}, "plot": base,
            "fidelity": {"kind": "faithful", "note": ""},
            "claim": {"text": "The queue is faster than the socket: always.",
                      "paper": {"place": "Sec. 6.4.1, L796", "quote": "q"},
                      "check": check or {"kind": "less", "y": "transfer_ns.p50",
                                         "better": {"design": "push1-watermark-pull"},
                                         "worse": {"design": "socket"}}}}


def pingpong_rows(repeats=3):
    """Queue and socket ping-pong rows; every row carries the provider's raw write ping-pong."""
    rows = []
    for rep in range(repeats):
        for size, queue, socket, raw in ((4, 400, 12000, 200), (4096, 1800, 19000, 450)):
            for design, value in (("push1-watermark-pull", queue), ("socket", socket)):
                rows.append({"type": "pingpong", "design": design, "item_bytes": size,
                             "repeat_index": rep,
                             "transfer_ns": {"p50": value + 10 * rep, "p99": 2 * value},
                             "raw_write_pingpong_ns": {"p50": raw + rep}})
    return rows


def experiment(ent, rows, **header):
    head = {"type": "experiment", "id": ent["id"], "entry": ent, "provider": "shm", "quick": False,
            "repeat": 3, "environment": {"cpu_model": "Test CPU", "cores": 2}}
    head.update(header)
    return D.Experiment(path=ent["id"] + ".jsonl", header=head, rows=rows)


def rr_rows(sizes=(64, 256, 4096, 16384), requesters=(1, 2, 4)):
    rows = []
    for req in requesters:
        for size in sizes:
            for i, pattern in enumerate(("WriteWrite", "SendSend", "WriteSend", "SendWrite")):
                rows.append({"bench": "rr", "pattern": pattern, "response_bytes": size,
                             "requesters": req, "MBps": (i + 1) * size * req / 64.0})
    return rows


def rr_entry(**plot):
    ent = entry(dict({"x": "requesters", "y": "MBps", "series": ["pattern", "response_bytes"],
                      "logx": False, "logy": True, "y_scale": 1}, **plot),
                check={"kind": "greater", "y": "MBps", "better": {"pattern": "WriteWrite"},
                       "worse": {"pattern": "SendSend"}, "at": "largest_x"},
                rows={"bench": "rr"}, id_="000-test")
    return ent


class LegendWordsTest(unittest.TestCase):
    """plot.labels and plot.names: no raw JSON values or field names in legends and tables."""

    def test_labels_map_values_to_words(self):
        labels = {"batching": {"true": "batched", "false": "unbatched"},
                  "mode": {"send": ""}, "measure": {"b_eff_lmax": "b_eff at Lmax"},
                  "loss": {"0.25": "a quarter"}}
        self.assertEqual(D.series_label((True,), ("batching",), labels), "batched")
        self.assertEqual(D.series_label((False,), ("batching",), labels), "unbatched")
        # An empty word leaves the value out; other fields keep the reader's defaults.
        self.assertEqual(D.series_label(("fabric", "send"), ("path", "mode"), labels), "fabric")
        self.assertEqual(D.series_label((True,), ("inject",), labels), "inject")
        self.assertEqual(D.format_x("b_eff_lmax", "measure", labels), "b_eff at Lmax")
        self.assertEqual(D.format_x(0.25, "loss", labels), "a quarter")
        # Claim details keep the rows' own values.
        self.assertEqual(D.series_label((True,)), "true")

    def test_names_title_the_fields(self):
        self.assertEqual(D.field_title(["size_bytes", "recv_post"]), "size, recv post")
        self.assertEqual(D.field_title(["size_bytes", "recv_post"],
                                       {"recv_post": "receives posted", "size_bytes": "payload"}),
                         "payload, receives posted")

    def test_prepare_carries_labels_to_the_page(self):
        ent = entry({"labels": {"design": {"push1-watermark-pull": "basic queue"}},
                     "names": {"design": "queue"}})
        pdata = D.prepare(experiment(ent, pingpong_rows()))
        self.assertEqual(pdata.series_text(("push1-watermark-pull",)), "basic queue")
        self.assertEqual(pdata.field_text(), "queue")
        page = P.data_html(experiment(ent, pingpong_rows()), pdata)
        self.assertIn("<td>basic queue</td>", page)
        self.assertNotIn("push1-watermark-pull</td>", page)

    def test_malformed_options_are_one_error_naming_them(self):
        for plot, words in (({"labels": {"design": "basic"}}, "plot.labels"),
                            ({"names": {"design": 3}}, "plot.names"),
                            ({"y_extra": {"field": "x"}}, "plot.y_extra"),
                            ({"y_extra": [{"label": "raw"}]}, "plot.y_extra[0]"),
                            ({"y_extra": [{"field": "a", "colour": "red"}]}, "unknown key 'colour'"),
                            ({"style": "size_bytes"}, "plot.style"),
                            ({"panels": "design", "style": "design"}, "plot.style"),
                            ({"layout": "tall"}, "plot.layout"),
                            ({"y_extras": []}, "unknown option 'y_extras'")):
            with self.subTest(plot=plot):
                with self.assertRaises(D.FabflowError) as caught:
                    D.prepare(experiment(entry(plot), pingpong_rows()))
                self.assertIn(words, str(caught.exception))


class ExtraYTest(unittest.TestCase):
    """plot.y_extra: a second y field drawn beside the main one."""

    def test_an_extra_of_its_own_is_one_curve_from_the_rows_where_selects(self):
        ent = entry({"y_extra": [{"field": "raw_write_pingpong_ns.p50", "label": "raw write",
                                  "series": [], "where": {"design": "push1-watermark-pull"}}]})
        pdata = D.prepare(experiment(ent, pingpong_rows()))
        self.assertEqual(len(pdata.points), 4)  # unchanged: 2 designs x 2 sizes
        (extra,) = pdata.extras
        self.assertEqual((extra.label, extra.per_series, extra.series_order), ("raw write", False, [()]))
        self.assertEqual([(p.x, p.median, p.low, p.high, p.n) for p in extra.points],
                         [(4.0, 0.201, 0.2, 0.202, 3), (4096.0, 0.451, 0.45, 0.452, 3)])

    def test_a_per_series_extra_shares_the_series_and_the_scale(self):
        ent = entry({"y_name": "p50", "y_extra": [{"field": "transfer_ns.p99", "label": "p99"}]})
        pdata = D.prepare(experiment(ent, pingpong_rows()))
        (extra,) = pdata.extras
        self.assertTrue(extra.per_series)
        self.assertEqual(extra.series_order, pdata.series_order)
        self.assertEqual(extra.points[0].median, 0.8)  # 2 x 400 ns in us
        curves, keys = F.build_curves(ent["plot"], pdata)
        self.assertEqual(len(curves), 4)
        # One colour per design, one style per quantity.
        self.assertEqual(keys.colours, [("push1-watermark-pull",), ("socket",)])
        self.assertEqual(keys.styles, [("p50",), ("p99",)])
        self.assertEqual([keys.style_index(c) for c in curves], [0, 0, 1, 1])
        self.assertEqual([keys.colour(c) for c in curves], ["C0", "C1", "C0", "C1"])
        self.assertEqual([e[0] for e in F.legend_entries(keys)],
                         ["heading", "colour", "colour", "heading", "style", "style"])

    def test_the_claim_still_judges_the_main_y(self):
        ent = entry({"y_extra": [{"field": "raw_write_pingpong_ns.p50", "series": []}]})
        exp = experiment(ent, pingpong_rows())
        pdata, verdict = cli.analyse(exp)
        self.assertEqual(verdict.verdict, C.HOLDS, verdict.detail)
        self.assertEqual(pdata.extras[0].label, "p50")  # the field's last part by default

    def test_table_long_and_wide_show_the_extra_column(self):
        rows = []
        for rep in range(2):
            for protocol, base in (("pipeline", 300.0), ("caching-pipeline", 480.0)):
                for measure, factor in (("b_eff", 1.0), ("pingpong_lmax", 1.5)):
                    rows.append({"type": "beff_summary", "protocol": protocol, "measure": measure,
                                 "mb_s": base * factor + rep,
                                 "per_process_mb_s": None if measure == "pingpong_lmax"
                                 else (base * factor + rep) / 4})
        plot = {"kind": "table", "x": "measure", "y": "mb_s", "series": ["protocol"],
                "xlabel": "measure", "ylabel": "accumulated bandwidth (MB/s)", "logx": False,
                "y_scale": 1, "y_name": "accumulated",
                "y_extra": [{"field": "per_process_mb_s", "label": "per process"}],
                "labels": {"measure": {"pingpong_lmax": "ping-pong at Lmax"}}}
        ent = entry(plot, rows={"type": "beff_summary"}, id_="004-test",
                    check={"kind": "greater", "y": "mb_s", "better": {"protocol": "caching-pipeline"},
                           "worse": {"protocol": "pipeline"}})
        pdata = D.prepare(experiment(ent, rows))
        header, table, numeric_from = F.table_rows(plot, pdata)
        self.assertEqual(header, ["protocol", "measure", "accumulated", "min", "max", "per process", "n"])
        self.assertEqual(table[0], ["pipeline", "b_eff", "300.5", "300", "301", "75.12", "2"])
        self.assertEqual(table[1][1], "ping-pong at Lmax")
        self.assertEqual(table[1][5], "-")  # per process is null at ping-pong
        self.assertEqual(numeric_from, 2)
        wide = dict(plot, layout="wide")
        header, table, numeric_from = F.table_rows(wide, pdata)
        self.assertEqual(header, ["protocol", "b_eff", "b_eff\nper process", "ping-pong at Lmax"])
        self.assertEqual(table[1], ["caching-pipeline", "480.5 (480-481)", "120.1 (120-120.2)",
                                    "720.5 (720-721)"])
        self.assertEqual(numeric_from, 1)


class LooksTest(unittest.TestCase):
    """One colour per pattern, one line style per size; small multiples; many series."""

    def test_style_field_gives_colours_by_pattern_and_styles_by_size(self):
        ent = rr_entry(style="response_bytes")
        pdata = D.prepare(experiment(ent, rr_rows()))
        curves, keys = F.build_curves(ent["plot"], pdata)
        self.assertEqual(len(curves), 16)
        self.assertEqual(len(keys.colours), 4)
        self.assertEqual(len(keys.styles), 4)
        colours = {keys.colour(c) for c in curves if c.colour == ("SendSend",)}
        self.assertEqual(colours, {"C1"})
        self.assertEqual(keys.style_labels[(4096,)], "4KB")
        entries = F.legend_entries(keys)
        self.assertEqual([t for w, _, t in entries if w == "heading"], ["pattern", "size"])

    def test_many_series_without_a_style_get_one_by_the_last_field(self):
        ent = rr_entry()
        pdata = D.prepare(experiment(ent, rr_rows()))
        self.assertEqual(F.style_field(ent["plot"], pdata), "response_bytes")
        few = D.prepare(experiment(ent, rr_rows(sizes=(64,))))
        self.assertIsNone(F.style_field(ent["plot"], few))

    def test_panels_split_by_a_field_in_numeric_order(self):
        ent = rr_entry(panels="response_bytes", names={"response_bytes": "response"})
        rows = rr_rows(sizes=(4096, 64))
        pdata = D.prepare(experiment(ent, rows))
        curves, keys = F.build_curves(ent["plot"], pdata)
        self.assertEqual(keys.panels, [64, 4096])
        self.assertEqual(F.panel_title(pdata, "response_bytes", 64), "response 64B")
        self.assertEqual(keys.styles, [])
        self.assertEqual(len(keys.colours), 4)

    def test_spread_note(self):
        pdata = D.prepare(experiment(entry({}), pingpong_rows(repeats=3)))
        curves, _ = F.build_curves({}, pdata)
        self.assertEqual(F.spread_note(curves, "line"),
                         "each point: the median of 3 repeats; error bars: min to max")
        pdata = D.prepare(experiment(entry({}), pingpong_rows(repeats=1)))
        curves, _ = F.build_curves({}, pdata)
        self.assertIn("one run", F.spread_note(curves, "bar"))


class MissingSeriesTest(unittest.TestCase):
    """A series refused on the provider, or one the claim needs that the run lacks, is said."""

    def test_refused_series_and_absent_claim_groups(self):
        rows = pingpong_rows(repeats=1)
        rows += [{"type": "pingpong", "design": "push1-pull-pull", "item_bytes": size,
                  "unsupported": "the provider has no read"} for size in (4, 4096)]
        rows.append({"type": "pingpong", "design": "push1-push-pull", "item_bytes": 4096,
                     "unsupported": "too large"})
        check = {"kind": "all", "checks": [
            {"kind": "less", "y": "transfer_ns.p50", "better": {"design": "push1-watermark-pull"},
             "worse": {"design": "socket"}},
            {"kind": "less", "y": "transfer_ns.p50", "better": {"design": "write-like"},
             "worse": {"design": "socket"}},
            {"kind": "less", "y": "transfer_ns.p50", "better": {"design": "push1-pull-pull"},
             "worse": {"design": "socket"}}]}
        ent = entry({"labels": {"design": {"write-like": "WRITE-like"}}}, check=check)
        pdata = D.prepare(experiment(ent, rows))
        self.assertEqual(pdata.missing, [
            "not measured on shm: push1-pull-pull (refused: the provider has no read)",
            "not measured on shm: push1-push-pull at 4K (refused: too large)",
            "no rows for WRITE-like in this run (the claim compares them)"])

    def test_condition_text(self):
        self.assertEqual(D.condition_text({"batching": False, "more_hint": "used"}),
                         "no batching, more hint used")
        self.assertEqual(D.condition_text({"mode": ["write", "write-like"]}, names={"mode": "mode"}),
                         "mode write or mode write-like")


class NotOfferedTest(unittest.TestCase):
    """A table names the endpoint types the provider does not offer: a row saying so."""

    def pdata(self, layout):
        plot = {"kind": "table", "x": "path", "y": "inject_size", "series": ["point.-e"],
                "names": {"point.-e": "endpoint type"}, "layout": layout, "y_scale": 1}
        rows = [{"type": "latency", "path": "fabric", "point.-e": e, "inject_size": size}
                for e, size in (("rdm", 1256), ("dgram", 1472))]
        rows.append({"unsupported": "provider 'udp' offers no msg endpoints on this machine",
                     "refused_point": True, "point.-e": "msg"})
        rows.append({"unsupported": "too large", "point.-e": "big"})
        ent = entry(plot, check={"kind": "differ", "y": "inject_size", "factor": 1.1}, rows={})
        return D.prepare(experiment(ent, rows))

    def test_long_and_wide_tables_have_a_row_per_refused_type(self):
        header, rows, _ = F.table_rows({"layout": "long"}, self.pdata("long"))
        self.assertEqual(header, ["endpoint type", "path", "median", "n"])
        self.assertEqual(rows, [["rdm", "fabric", "1256", "1"], ["dgram", "fabric", "1472", "1"],
                                ["msg", "-", "not offered", "-"], ["big", "-", "refused", "-"]])
        header, rows, _ = F.table_rows({"layout": "wide"}, self.pdata("wide"))
        self.assertEqual(header, ["endpoint type", "fabric"])
        self.assertEqual(rows[2:], [["msg", "not offered"], ["big", "refused"]])


class DistributionSplitTest(unittest.TestCase):
    """CDFs are split by every swept field: 002-fig30's loss rates are separate curves."""

    def row(self, loss, buckets, **extra):
        out = {"type": "latency", "path": "socket", "provider": "tcp", "mode": "spin",
               "size_bytes": 64, "latency_ns": {"histogram": buckets}, "point.--loss": str(loss)}
        out.update(extra)
        return out

    def test_loss_rates_are_separate_curves(self):
        rows = [self.row(0, [[10, 11, 5]], loss_percent=0.0),
                self.row(2, [[10, 11, 4], [200000, 210000, 1]], loss_percent=2.0)]
        self.assertEqual(DIST.label_fields(rows), ["loss_percent"])
        self.assertEqual(list(DIST.merged_buckets(rows, "latency_ns")), ["0 % loss", "2 % loss"])

    def test_a_swept_flag_no_field_names_is_a_label(self):
        rows = [self.row(0, [[10, 11, 5]]), self.row(2, [[10, 11, 4]]),
                self.row(2, [[12, 13, 4]])]  # a repeat: merged into the 2 curve
        self.assertEqual(DIST.label_fields(rows), ["point.--loss"])
        curves = DIST.merged_buckets(rows, "latency_ns")
        self.assertEqual(list(curves), ["loss 0", "loss 2"])
        self.assertEqual(len(curves["loss 2"]), 2)

    def test_the_entry_labels_apply_and_many_curves_split_colour_from_style(self):
        rows = [{"type": "latency", "inject": inject, "size_bytes": size,
                 "latency_ns": {"histogram": [[10, 11, 1]]}}
                for inject in (False, True) for size in (8, 64, 512)]
        labels = {"inject": {"true": "inlined", "false": "regular"}}
        curves = DIST.curves_of(rows, "latency_ns", labels)
        self.assertEqual([c[0] for c in curves][:2], ["regular, 8 B", "regular, 64 B"])
        looks = DIST._looks(curves)
        self.assertEqual({looks[i]["color"] for i in range(3)}, {"C0"})
        self.assertEqual(len({str(looks[i]["linestyle"]) for i in range(3)}), 3)


def items_for_index(tmp):
    """Two experiments as cli.cmd_report builds them, the second on another build."""
    first = entry({"y_extra": [{"field": "raw_write_pingpong_ns.p50", "series": [],
                                "label": "raw write"}]})
    second = copy.deepcopy(first)
    second["id"] = "004-other"
    second["fidelity"] = {"kind": "substitute", "note": "n"}
    rows = pingpong_rows()
    rows[0]["environment"] = {"busy": True}
    items = []
    for ent, env, cores in ((first, {"cpu_model": "Test CPU", "git_revision": "aaa", "busy": True,
                                     "load_start": 3.5, "cores": 2}, 16),
                            (second, {"cpu_model": "Test CPU", "git_revision": "bbb",
                                      "load_start": 0.5, "cores": 2}, None)):
        header = {"environment": env}
        if cores:
            header["cores"] = cores
        exp = experiment(ent, rows if ent is first else pingpong_rows(), **header)
        pdata, verdict = cli.analyse(exp)
        items.append((exp, pdata, verdict, None, ent["id"] + ".html"))
    return items


class ReportIndexTest(unittest.TestCase):
    def test_index_table_environment_and_busy(self):
        with tempfile.TemporaryDirectory() as tmp:
            items = items_for_index(tmp)
        page = P.report_page(items)
        for fragment in ("<th>entry</th><th>paper&#x27;s claim</th><th>fidelity</th><th>verdict</th>"
                         "<th>scale</th><th>repeats</th><th>busy rows</th><th>figure</th>",
                         "The queue is faster than the socket <span",  # the claim up to its colon
                         "(Sec. 6.4.1, L796)", "16 CPUs", "2 CPUs (machine)",
                         "<td>substitute</td>", "<td class=\"num\">3</td>",
                         "<td class=\"num busy\">1 of 12</td>", "<td class=\"num\">0 of 12</td>",
                         "Environment (gathered from all 2 entries)",
                         "git_revision (differs)", "aaa (1: 003-test); bbb (1: 004-other)",
                         "0.5 to 3.5 over the entries",
                         "Busy machine: 1 of 2 entries", "1 of 24 bench rows"):
            self.assertIn(fragment, page)
        self.assertNotIn("cpu_model (differs)", page)

    def test_short_claim_and_repeats(self):
        text, place = P.short_claim({"claim": {"text": "Costs fall (the paper: 450 per byte). More.",
                                               "paper": {"place": "L180", "quote": "q"}}})
        self.assertEqual((text, place), ("Costs fall (the paper: 450 per byte).", "L180"))
        text, _ = P.short_claim({"claim": {"text": "word " * 60}})
        self.assertTrue(text.endswith(" ...") and len(text) <= 164)
        exp = experiment(entry({}), pingpong_rows(repeats=2), repeat=3)
        pdata = D.prepare(exp)
        self.assertEqual(P.repeats_text(exp, pdata), "3 asked, 2 measured")

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_report_has_thumbnails(self):
        with tempfile.TemporaryDirectory() as tmp:
            ent = entry({})
            path = os.path.join(tmp, ent["id"] + ".jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps(experiment(ent, []).header) + "\n")
                for row in pingpong_rows():
                    f.write(json.dumps(row) + "\n")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(cli.main(["report", tmp]), 0)
            with open(os.path.join(tmp, "index.html"), encoding="utf-8") as f:
                page = f.read()
            self.assertIn("<img class=\"thumb\" alt=\"003-test\" src=\"data:image/png;base64,", page)
            with open(os.path.join(tmp, ent["id"] + ".png"), "rb") as f:
                thumb = P.thumbnail(f.read())
            import matplotlib.image as mpimg
            self.assertLessEqual(mpimg.imread(io.BytesIO(thumb), format="png").shape[1], 200)


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
class DrawingTest(unittest.TestCase):
    def draw(self, ent, rows, tmp):
        exp = experiment(ent, rows)
        exp.path = os.path.join(tmp, ent["id"] + ".jsonl")
        pdata, verdict = cli.analyse(exp)
        return cli.build_outputs(exp, pdata, verdict)

    def test_every_new_option_draws_and_the_same_data_gives_the_same_files(self):
        cases = [
            (rr_entry(panels="response_bytes", style="pattern"), rr_rows()),
            (rr_entry(style="response_bytes"), rr_rows()),
            (entry({"y_extra": [{"field": "raw_write_pingpong_ns.p50", "series": [],
                                 "label": "raw write"}], "logy": True}), pingpong_rows()),
            (entry({"kind": "bar", "logy": True, "x": "item_bytes", "y_name": "p50",
                    "y_extra": [{"field": "transfer_ns.p99", "label": "p99"}]}), pingpong_rows()),
            (entry({"kind": "table", "layout": "wide",
                    "y_extra": [{"field": "transfer_ns.p99", "label": "p99"}]}), pingpong_rows()),
        ]
        for ent, rows in cases:
            with self.subTest(plot=ent["plot"]):
                outputs = []
                for _ in range(2):
                    with tempfile.TemporaryDirectory() as tmp:
                        png = self.draw(ent, rows, tmp)
                        with open(os.path.join(tmp, ent["id"] + ".svg"), "rb") as f:
                            svg = f.read()
                        with open(os.path.join(tmp, ent["id"] + ".html"), "rb") as f:
                            html = f.read()
                        outputs.append((png, svg, html))
                self.assertEqual(outputs[0], outputs[1])
                self.assertTrue(outputs[0][0].startswith(b"\x89PNG"))

    def test_log_ticks_read_as_numbers(self):
        plt = F.load_pyplot()
        fig, ax = plt.subplots()
        try:
            ax.plot([1, 2], [150, 9000])
            F._log_y(ax)
            ax.set_ylim(100, 10000)
            fig.canvas.draw()
            shown = []
            for tick in ax.yaxis.get_major_ticks() + ax.yaxis.get_minor_ticks():
                if 100 <= tick.get_loc() <= 10000 and tick.label1.get_text():
                    shown.append((tick.get_loc(), tick.label1.get_text()))
            self.assertEqual([text for _, text in sorted(shown)],
                             ["100", "200", "500", "1k", "2k", "5k", "10k"])
            ax.set_ylim(10, 1e6)  # five decades: the decades only
            fig.canvas.draw()
            shown = [t.label1.get_text() for t in ax.yaxis.get_minor_ticks()
                     if 10 <= t.get_loc() <= 1e6 and t.label1.get_text()]
            self.assertEqual(shown, [])
        finally:
            plt.close(fig)

    def test_bars_stay_linear(self):
        plt = F.load_pyplot()
        ent = entry({"kind": "bar", "logy": True, "x": "item_bytes"})
        pdata = D.prepare(experiment(ent, pingpong_rows()))
        curves, keys = F.build_curves(ent["plot"], pdata)
        fig, ax = plt.subplots()
        try:
            F._bars(ax, ent["plot"], pdata, curves, keys, True)
            self.assertEqual(ax.get_yscale(), "linear")
            self.assertEqual(ax.get_ylim()[0], 0)
        finally:
            plt.close(fig)


class CataloguePlotTest(unittest.TestCase):
    """The catalogue's plot sections: options well formed, the missing series drawn."""

    @classmethod
    def setUpClass(cls):
        cls.entries = {}
        for path in sorted(glob.glob(os.path.join(CATALOGUE, "*.json"))):
            with open(path, encoding="utf-8") as f:
                for e in json.load(f)["experiments"]:
                    cls.entries[e["id"]] = e

    def test_every_plot_section_is_well_formed(self):
        for id_, e in self.entries.items():
            with self.subTest(id=id_):
                D.plot_options(e["plot"])
                if e["plot"]["kind"] == "bar":
                    self.assertFalse(e["plot"].get("logy"), "bars are drawn on linear axes")

    def test_the_missing_series_are_drawn(self):
        fields = {id_: [x["field"] for x in self.entries[id_]["plot"].get("y_extra", [])]
                  for id_ in ("003-fig6.12", "002-fig16", "004-table-beff")}
        self.assertEqual(fields, {"003-fig6.12": ["raw_write_pingpong_ns.p50"],
                                  "002-fig16": ["latency_ns.p99"],
                                  "004-table-beff": ["per_process_mb_s"]})

    def test_entries_with_many_series_split_colour_from_style(self):
        for id_ in ("000-fig5", "000-fig6", "000-fig10"):
            plot = self.entries[id_]["plot"]
            self.assertTrue(plot.get("panels") or plot.get("style"), id_)


if __name__ == "__main__":
    unittest.main()
