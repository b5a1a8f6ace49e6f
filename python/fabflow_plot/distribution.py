"""Latency distributions: a CDF (with its tail on a log scale) and a histogram of
every latency row of a JSON-lines file.

Every latency object of fabflow's benchmark JSON carries a log-bucketed histogram
(`histogram`: [[low_ns, high_ns, count], ...], 8 buckets per power of two, empty
buckets left out; docs/bench-output.md). Rows with the same label (the fields
that tell rows apart: path, provider, mode, receive posting, loop, inline, size,
...) are merged by adding their bucket counts, so repeats of one point give one
curve. The CDF is exact at the bucket edges and says nothing finer than a bucket
(about 9 % of the value).
"""

import json

from . import data as D
from . import figure as F

# Fields that tell latency rows apart, in legend order; a field with one value
# in the whole file is left out of the labels.
LABEL_FIELDS = ("path", "provider", "endpoint", "op", "mode", "pattern", "design",
                "recv_post", "loop", "rate_per_s", "inject", "size_bytes")


def load_rows(path, field):
    """The JSON objects of `path` whose `field` is a latency object with a histogram."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line or not line.startswith("{"):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise D.FabflowError(f"{path}:{number}: not JSON: {e.msg}") from None
                latency = row.get(field) if isinstance(row, dict) else None
                if isinstance(latency, dict) and isinstance(latency.get("histogram"), list):
                    rows.append(row)
    except OSError as e:
        raise D.FabflowError(f"{path}: cannot read: {e.strerror or e}") from None
    if not rows:
        raise D.FabflowError(f"{path}: no row has a '{field}' latency object with a histogram")
    return rows


def _label_value(name, value):
    if isinstance(value, bool):
        return "inline" if value else "no inline"
    if name == "size_bytes" and isinstance(value, (int, float)):
        return D.format_size(float(value)) + " B"
    if name == "rate_per_s" and isinstance(value, (int, float)):
        return f"open loop {value:g}/s"
    return str(value)


def _style(i):
    """Colour cycles every 10 curves; the line style tells the cycles apart."""
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def _legend(fig, axes, count):
    """Below the axes, in as many columns as it takes to stay short."""
    handles, labels = axes.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=1 if count <= 4 else 2, fontsize=7, frameon=False)


def label_fields(rows):
    """The label fields that take more than one value in `rows`."""
    out = []
    for name in LABEL_FIELDS:
        values = {json.dumps(row.get(name), sort_keys=True) for row in rows}
        if len(values) > 1:
            out.append(name)
    return out


def merged_buckets(rows, field):
    """{label: [(low, high, count), ...] sorted by low}, counts of equal buckets added."""
    names = label_fields(rows)
    merged = {}
    for row in rows:
        parts = []
        for name in names:
            if name == "endpoint" and row.get("path") == "socket":
                continue  # a kernel socket has no fabric endpoint type
            if name in row and row[name] is not None:
                parts.append(_label_value(name, row[name]))
        label = ", ".join(parts) or "all rows"
        buckets = merged.setdefault(label, {})
        for bucket in row[field]["histogram"]:
            if (not isinstance(bucket, list) or len(bucket) != 3 or
                    not all(isinstance(v, (int, float)) for v in bucket) or
                    not 0 <= bucket[0] < bucket[1] or bucket[2] < 0):
                raise D.FabflowError(f"malformed histogram bucket {bucket!r}")
            key = (float(bucket[0]), float(bucket[1]))
            buckets[key] = buckets.get(key, 0) + int(bucket[2])
    return {label: sorted((lo, hi, n) for (lo, hi), n in b.items() if n > 0)
            for label, b in merged.items()}


def cdf_points(buckets):
    """(xs, ys): the cumulative fraction at each bucket's upper edge, starting at 0
    at the lowest edge. Empty input gives two empty lists."""
    total = sum(n for _, _, n in buckets)
    if total == 0:
        return [], []
    xs, ys = [buckets[0][0]], [0.0]
    seen = 0
    for _, hi, n in buckets:
        seen += n
        xs.append(hi)
        ys.append(seen / total)
    return xs, ys


def histogram_points(buckets):
    """(xs, ys) of a step line: each bucket's share of the samples, flat across
    the bucket, dropping to 0 across gaps between non-adjacent buckets."""
    total = sum(n for _, _, n in buckets)
    xs, ys = [], []
    if total == 0:
        return xs, ys
    previous_hi = None
    for lo, hi, n in buckets:
        if previous_hi is not None and lo > previous_hi * (1 + 1e-9):
            xs += [previous_hi, lo]
            ys += [0.0, 0.0]
        elif previous_hi is None:
            xs.append(lo)
            ys.append(0.0)
        xs += [lo, hi]
        ys += [n / total, n / total]
        previous_hi = hi
    xs.append(previous_hi)
    ys.append(0.0)
    return xs, ys


def render(path, base, field="latency_ns", title=None):
    """Write BASE-cdf.png/.svg and BASE-hist.png/.svg; return the PNG paths."""
    rows = load_rows(path, field)
    curves = merged_buckets(rows, field)
    plt = F.load_pyplot()
    heading = title or f"{path}: {field}"
    written = []

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.5), dpi=F.DPI)
    for i, (label, buckets) in enumerate(curves.items()):
        xs, ys = cdf_points(buckets)
        us = [x / 1000 for x in xs]
        left.step(us, ys, where="post", label=label, **_style(i))
        # The tail: the share of samples above each edge, on a log scale.
        tail = [(u, 1 - y) for u, y in zip(us, ys) if 1 - y > 0]
        if tail:
            right.step([u for u, _ in tail], [t for _, t in tail], where="post", **_style(i))
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("latency (us, log scale)")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("fraction of samples at or below")
    left.set_ylim(0, 1.02)
    right.set_yscale("log")
    right.set_ylabel("fraction of samples above (tail)")
    fig.suptitle(f"{heading}\nCDF from the log-bucketed histograms (bucket resolution)",
                 fontsize=9)
    written.append(_finish(plt, fig, left, len(curves), f"{base}-cdf"))

    fig, ax = plt.subplots(figsize=F.FIGSIZE, dpi=F.DPI)
    for i, (label, buckets) in enumerate(curves.items()):
        xs, ys = histogram_points(buckets)
        ax.plot([x / 1000 for x in xs], ys, label=label, linewidth=1.2, **_style(i))
    ax.set_xscale("log")
    ax.set_xlabel("latency (us, log scale; 8 buckets per power of two)")
    ax.set_ylabel("share of samples in the bucket")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{heading}\nhistogram", fontsize=9)
    written.append(_finish(plt, fig, ax, len(curves), f"{base}-hist"))
    return written


def _finish(plt, fig, legend_axes, count, stem):
    """Lay out, add the legend below, save STEM.png and STEM.svg; return the PNG path.
    Fixed metadata, as figure.render: the same data gives the same files."""
    fig.tight_layout()
    _legend(fig, legend_axes, count)
    fig.savefig(f"{stem}.png", bbox_inches="tight", metadata={"Software": None})
    fig.savefig(f"{stem}.svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return f"{stem}.png"
