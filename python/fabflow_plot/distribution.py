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
                "recv_post", "loop", "rate_per_s", "inject", "loss_percent", "size_bytes")


def load_rows(path, field):
    """The JSON objects of `path` whose `field` is a latency object with a histogram."""
    return _load(path, field)[0]


def _load(path, field):
    """(latency rows, the entry's plot.labels when the file starts with an experiment header)."""
    rows, labels = [], {}
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
                if isinstance(row, dict) and row.get("type") == "experiment" and not rows:
                    plot = (row.get("entry") or {}).get("plot") or {}
                    if isinstance(plot.get("labels"), dict):
                        labels = plot["labels"]
                    continue
                latency = row.get(field) if isinstance(row, dict) else None
                if isinstance(latency, dict) and isinstance(latency.get("histogram"), list):
                    rows.append(row)
    except OSError as e:
        raise D.FabflowError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise D.FabflowError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if not rows:
        raise D.FabflowError(f"{path}: no row has a '{field}' latency object with a histogram")
    return rows, labels


def _label_value(name, value, labels=None):
    word = D._label_for(labels, name, value)
    if word is not None:
        return word
    if name.startswith("point."):
        return f"{name[len('point.'):].lstrip('-')} {D._plain_text(value)}"
    if name == "loss_percent" and isinstance(value, (int, float)):
        return f"{value:g} % loss"
    if isinstance(value, bool):
        return "inline" if value else "no inline"
    if name == "size_bytes" and isinstance(value, (int, float)):
        return D.format_size(float(value)) + " B"
    if name == "rate_per_s" and isinstance(value, (int, float)):
        return f"open loop {value:g}/s"
    return str(value)


_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))


def _legend(fig, axes, count):
    """Below the axes, in as many columns as it takes to stay short."""
    handles, labels = axes.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=1 if count <= 4 else 2, fontsize=7, frameon=False)


def _text(row, name):
    return json.dumps(D.get_field(row, name), sort_keys=True)


def label_fields(rows):
    """The label fields that take more than one value in `rows`, then every swept flag (the
    runner's point.<flag> keys) that those fields do not already tell apart: a curve is never
    the merge of two points of a sweep (a loss rate, a window)."""
    out = [name for name in LABEL_FIELDS if len({_text(row, name) for row in rows}) > 1]
    swept = sorted({k for row in rows for k in row if k.startswith("point.")})
    for key in swept:
        seen = {}
        for row in rows:
            seen.setdefault(tuple(_text(row, n) for n in out), set()).add(_text(row, key))
        if any(len(values) > 1 for values in seen.values()):
            out.append(key)
    return out


def merged_buckets(rows, field, labels=None):
    """{label: [(low, high, count), ...] sorted by low}, counts of equal buckets added.
    labels: the entry's words for values (plot.labels)."""
    return {label: buckets for label, _, _, buckets in curves_of(rows, field, labels)}


def curves_of(rows, field, labels=None):
    """[(label, colour key, style key, buckets)] in first-seen order. With two or more label
    fields and more than five curves, the last field (the size, a swept flag) is the line
    style and the others the colour, so that one colour means one path or mode."""
    names = label_fields(rows)
    merged, looks = {}, {}
    for row in rows:
        parts = []
        for name in names:
            if name == "endpoint" and row.get("path") == "socket":
                parts.append((name, ""))
                continue  # a kernel socket has no fabric endpoint type
            word = ""
            if name in row and row[name] is not None:
                word = _label_value(name, row[name], labels)
            parts.append((name, word))
        label = ", ".join(w for _, w in parts if w) or "all rows"
        if label not in looks:
            looks[label] = (tuple(w for _, w in parts[:-1]), parts[-1][1] if parts else "")
        buckets = merged.setdefault(label, {})
        for bucket in row[field]["histogram"]:
            if (not isinstance(bucket, list) or len(bucket) != 3 or
                    not all(isinstance(v, (int, float)) for v in bucket) or
                    not 0 <= bucket[0] < bucket[1] or bucket[2] < 0):
                raise D.FabflowError(f"malformed histogram bucket {bucket!r}")
            key = (float(bucket[0]), float(bucket[1]))
            buckets[key] = buckets.get(key, 0) + int(bucket[2])
    split = len(names) >= 2 and len(merged) > 5
    out = []
    for label, b in merged.items():
        colour, style = looks[label] if split else ((label,), "")
        out.append((label, colour, style, sorted((lo, hi, n) for (lo, hi), n in b.items() if n > 0)))
    return out


def _looks(curves):
    """A matplotlib style per curve: colour by colour key, line style by style key; more
    colours than ten without styles: the line style steps every ten (as before)."""
    colours, styles = [], []
    for _, colour, style, _ in curves:
        if colour not in colours:
            colours.append(colour)
        if style and style not in styles:
            styles.append(style)
    out = []
    for _, colour, style, _ in curves:
        c = colours.index(colour)
        s = styles.index(style) if style in styles else (c // 10 if not styles else 0)
        out.append({"color": f"C{c % 10}", "linestyle": _LINESTYLES[s % len(_LINESTYLES)]})
    return out


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
    rows, labels = _load(path, field)
    curves = curves_of(rows, field, labels)
    looks = _looks(curves)
    plt = F.load_pyplot()
    heading = title or f"{path}: {field}"
    written = []

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.5), dpi=F.DPI)
    for (label, _, _, buckets), look in zip(curves, looks):
        xs, ys = cdf_points(buckets)
        us = [x / 1000 for x in xs]
        left.step(us, ys, where="post", label=label, **look)
        # The tail: the share of samples above each edge, on a log scale.
        tail = [(u, 1 - y) for u, y in zip(us, ys) if 1 - y > 0]
        if tail:
            right.step([u for u, _ in tail], [t for _, t in tail], where="post", **look)
    for ax in (left, right):
        _log_x(ax)
        ax.set_xlabel("latency (us, log scale)")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("fraction of samples at or below")
    left.set_ylim(0, 1.02)
    right.set_yscale("log")
    F.readable_log_axis(right.yaxis)
    right.set_ylabel("fraction of samples above (tail)")
    fig.suptitle(f"{heading}\nCDF from the log-bucketed histograms (bucket resolution)",
                 fontsize=9)
    written.append(_finish(plt, fig, left, len(curves), f"{base}-cdf"))

    fig, ax = plt.subplots(figsize=F.FIGSIZE, dpi=F.DPI)
    for (label, _, _, buckets), look in zip(curves, looks):
        xs, ys = histogram_points(buckets)
        ax.plot([x / 1000 for x in xs], ys, label=label, linewidth=1.2, **look)
    _log_x(ax)
    ax.set_xlabel("latency (us, log scale; 8 buckets per power of two)")
    ax.set_ylabel("share of samples in the bucket")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{heading}\nhistogram", fontsize=9)
    written.append(_finish(plt, fig, ax, len(curves), f"{base}-hist"))
    return written


def _log_x(ax):
    """A log latency axis labelled 0.1, 1, 10 us (2 and 5 between over few decades)."""
    ax.set_xscale("log")
    F.readable_log_axis(ax.xaxis)


def _finish(plt, fig, legend_axes, count, stem):
    """Lay out, add the legend below, save STEM.png and STEM.svg; return the PNG path.
    Fixed metadata, as figure.render: the same data gives the same files."""
    fig.tight_layout()
    _legend(fig, legend_axes, count)
    fig.savefig(f"{stem}.png", bbox_inches="tight", metadata={"Software": None})
    fig.savefig(f"{stem}.svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return f"{stem}.png"
