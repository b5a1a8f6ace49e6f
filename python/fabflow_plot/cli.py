"""Command line: `figure DIR/ID.jsonl` and `report DIR`.

Exit status: 0 on success, 1 on any error (one line 'fabflow: error: ...' on
stderr), 3 when matplotlib is needed but cannot be imported.
"""

import argparse
import glob
import json
import os
import re
import sys

from . import advise_map as AM
from . import claims as C
from . import data as D
from . import distribution as DIST
from . import figure as F
from . import page as P

MISSING_MATPLOTLIB = ("fabflow: error: matplotlib is missing "
                      "(install python3-matplotlib; scripts/setup.sh does)")
USAGE = ("python3 -m fabflow_plot figure DIR/ID.jsonl | report DIR | "
         "distribution FILE.jsonl [--out BASE] [--field NAME] [--title TEXT] | "
         "advise-map BASE.json [--out BASE]")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage mistakes like every other error."""

    def error(self, message):
        raise D.FabflowError(f"{message} (usage: {USAGE})")


def _parser():
    parser = _Parser(prog="python3 -m fabflow_plot",
                     description="Figures, claim verdicts and HTML pages from fabflow experiment JSONL files.")
    sub = parser.add_subparsers(dest="command", required=True)
    fig = sub.add_parser("figure", help="write ID.png, ID.svg, ID.html next to ID.jsonl; print the verdict")
    fig.add_argument("jsonl")
    rep = sub.add_parser("report", help="write DIR/index.html for every DIR/*.jsonl; print its path")
    rep.add_argument("dir")
    dist = sub.add_parser("distribution",
                          help="write BASE-cdf.png/.svg and BASE-hist.png/.svg of every latency row")
    dist.add_argument("jsonl")
    dist.add_argument("--out", help="output base (default: the file's name without .jsonl)")
    dist.add_argument("--field", default="latency_ns", help="the latency object to draw")
    dist.add_argument("--title", help="the figures' heading")
    amap = sub.add_parser("advise-map", help="write BASE.png and BASE.svg of an advise map (BASE.json)")
    amap.add_argument("json")
    amap.add_argument("--out", help="output base (default: the file's name without .json)")
    return parser


def analyse(exp):
    """(plot data, verdict) for a loaded experiment."""
    pdata = D.prepare(exp)
    verdict = C.evaluate(exp.entry, pdata.rows, pdata.x_field, pdata.series_fields,
                         pdata.empty_reason, references=pdata.reference_rows)
    return pdata, verdict


def output_base(jsonl_path):
    base, ext = os.path.splitext(jsonl_path)
    return base if ext == ".jsonl" else jsonl_path


def _write(path, text):
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise D.FabflowError(f"{path}: cannot write: {e.strerror or e}") from None


def build_outputs(exp, pdata, verdict):
    """Write the PNG, SVG and HTML page of one experiment; return the PNG bytes."""
    base = output_base(exp.path)
    png, svg = base + ".png", base + ".svg"
    try:
        F.render(exp, pdata, png, svg)
        with open(png, "rb") as f:
            png_bytes = f.read()
    except OSError as e:
        raise D.FabflowError(f"{base}: cannot write the figure: {e.strerror or e}") from None
    _write(base + ".html", P.experiment_page(exp, pdata, verdict, png_bytes, os.path.basename(svg)))
    return png_bytes


def cmd_figure(path):
    exp = D.load_experiment(path)
    pdata, verdict = analyse(exp)
    build_outputs(exp, pdata, verdict)
    print(json.dumps({"id": exp.id, "verdict": verdict.verdict, "detail": verdict.detail}))
    return 0


def _natural(text):
    """Sort key in which '003-fig6.10' comes after '003-fig6.9'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _up_to_date(base, jsonl_path):
    """Whether the PNG and the page exist and are not older than the JSONL."""
    try:
        source = os.path.getmtime(jsonl_path)
        return all(os.path.getmtime(base + ext) >= source for ext in (".png", ".html"))
    except OSError:
        return False


def cmd_report(directory):
    if not os.path.isdir(directory):
        raise D.FabflowError(f"{directory}: not a directory")
    paths = glob.glob(os.path.join(glob.escape(directory), "*.jsonl"))
    if not paths:
        raise D.FabflowError(f"{directory}: no *.jsonl experiment files")
    # A file that cannot be read is reported and left out; the others still get their index.
    loaded, skipped = [], []
    for p in sorted(paths):
        try:
            loaded.append(D.load_experiment(p))
        except D.FabflowError as e:
            skipped.append((p, str(e).split(": ", 1)[-1]))
            print(f"fabflow: error: {e}", file=sys.stderr)
    experiments = sorted(loaded, key=lambda e: (_natural(e.id), e.path))
    items = []
    for exp in experiments:
        pdata, verdict = analyse(exp)
        base = output_base(exp.path)
        if _up_to_date(base, exp.path):
            with open(base + ".png", "rb") as f:
                png_bytes = f.read()
        else:
            png_bytes = build_outputs(exp, pdata, verdict)
        items.append((exp, pdata, verdict, png_bytes, os.path.basename(base) + ".html"))
    index = os.path.join(directory, "index.html")
    _write(index, P.report_page(items, skipped))
    print(index)
    return 1 if skipped else 0


def main(argv=None):
    try:
        args = _parser().parse_args(argv)
        if args.command == "figure":
            return cmd_figure(args.jsonl)
        if args.command == "distribution":
            base = args.out or output_base(args.jsonl)
            for written in DIST.render(args.jsonl, base, args.field, args.title):
                print(written)
            return 0
        if args.command == "advise-map":
            base = args.out or os.path.splitext(args.json)[0]
            for written in AM.render(args.json, base):
                print(written)
            return 0
        return cmd_report(args.dir)
    except F.MatplotlibMissing:
        print(MISSING_MATPLOTLIB, file=sys.stderr)
        return 3
    except D.FabflowError as e:
        print(f"fabflow: error: {e}", file=sys.stderr)
        return 1
