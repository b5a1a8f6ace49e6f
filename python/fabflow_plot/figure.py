"""Drawing an experiment's figure (PNG and SVG) with matplotlib.

matplotlib is imported only when a figure is drawn, with the non-interactive
Agg backend and fixed metadata so that the same data gives the same files.
Kinds: "line" (one line per series, error bars min..max over repeats),
"bar" (grouped bars, one per series at each x category) and "table" (the
aggregated numbers as a table image).
"""

import textwrap

from . import data as D

DPI = 110
FIGSIZE = (7.0, 4.5)
_LEGEND_INSIDE = 8  # more series than this: the legend moves to the right


class MatplotlibMissing(Exception):
    """matplotlib cannot be imported."""


def load_pyplot():
    """Import matplotlib with the Agg backend and deterministic output settings."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MatplotlibMissing(str(e)) from None
    matplotlib.rcParams["svg.hashsalt"] = "fabflow"
    matplotlib.rcParams["svg.fonttype"] = "path"
    matplotlib.rcParams["font.size"] = 9
    return plt


def machine_name(environment):
    """The CPU model when the runner recorded it; never the host name."""
    cpu = environment.get("cpu_model")
    return str(cpu).strip() if cpu else "this machine"


def title_text(exp):
    """'ID: title' (wrapped) and a second line naming provider and machine."""
    title = exp.entry.get("title") or ""
    first = textwrap.fill(f"{exp.id}: {title}" if title else exp.id, width=72)
    provider = exp.header.get("provider") or "unknown provider"
    second = f"provider {provider} on {machine_name(exp.environment)}"
    if exp.header.get("quick"):
        second += " (quick run)"
    return first, second


def render(exp, pdata, png_path, svg_path):
    """Draw the figure of one experiment and save it as PNG and SVG."""
    plt = load_pyplot()
    kind = exp.plot.get("kind", "line")
    if not pdata.points:
        fig = _empty_figure(plt, pdata.empty_reason or "nothing to plot")
    elif kind == "table":
        fig = _table_figure(plt, exp, pdata)
    else:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        if kind == "bar":
            _bars(ax, exp.plot, pdata)
        else:
            _lines(ax, exp.plot, pdata)
        _labels(ax, exp.plot, pdata)
        _legend(ax, pdata)
    first, second = title_text(exp)
    fig.axes[0].set_title(f"{first}\n{second}", fontsize=9, loc="left")
    try:
        fig.savefig(png_path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(svg_path, bbox_inches="tight", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(fig)


# --- kinds -----------------------------------------------------------------------

def _positions(pdata):
    """x position of every x value: the value itself, or its index when categorical."""
    if pdata.x_numeric:
        return {x: x for x in pdata.x_order}
    return {x: i for i, x in enumerate(pdata.x_order)}


def _has_spread(pdata):
    return any(p.n > 1 for p in pdata.points)


_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")


def _style(index):
    """Colours repeat every 10 series; line style and marker tell those apart."""
    turn = (index // 10) % len(_LINESTYLES)
    return {"linestyle": _LINESTYLES[turn], "marker": _MARKERS[turn]}


def _lines(ax, plot, pdata):
    pos = _positions(pdata)
    spread = _has_spread(pdata)
    for index, key in enumerate(pdata.series_order):
        pts = [p for p in pdata.points if p.series == key]
        xs = [pos[p.x] for p in pts]
        ys = [p.median for p in pts]
        style = dict(_style(index), markersize=4, linewidth=1.3, label=D.series_label(key, pdata.series_fields))
        if spread:
            err = [[p.median - p.low for p in pts], [p.high - p.median for p in pts]]
            ax.errorbar(xs, ys, yerr=err, capsize=3, **style)
        else:
            ax.plot(xs, ys, **style)
    _x_ticks(ax, plot, pdata)


def _bars(ax, plot, pdata):
    categories = pdata.x_order
    count = max(1, len(pdata.series_order))
    width = 0.8 / count
    spread = _has_spread(pdata)
    for i, key in enumerate(pdata.series_order):
        by_x = {p.x: p for p in pdata.points if p.series == key}
        xs, ys, lows, highs = [], [], [], []
        for c, x in enumerate(categories):
            if x in by_x:
                p = by_x[x]
                xs.append(c - 0.4 + width * (i + 0.5))
                ys.append(p.median)
                lows.append(p.median - p.low)
                highs.append(p.high - p.median)
        ax.bar(xs, ys, width=width * 0.95, label=D.series_label(key, pdata.series_fields),
               yerr=[lows, highs] if spread else None, capsize=2 if spread else 0)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels([D.format_x(x, pdata.x_field) for x in categories])
    if plot.get("logy"):
        # Bars start at 0: clip them to the axis instead of masking them away.
        ax.set_yscale("log", nonpositive="clip")
    else:
        _plain_y_ticks(ax)


def _x_ticks(ax, plot, pdata):
    """Log scales as asked; ticks at the measured x values where that is readable."""
    if not pdata.x_numeric:
        ax.set_xticks(range(len(pdata.x_order)))
        ax.set_xticklabels(pdata.x_order, rotation=30 if len(pdata.x_order) > 6 else 0,
                           ha="right" if len(pdata.x_order) > 6 else "center")
    else:
        import matplotlib.ticker as ticker
        size = D.is_size_field(pdata.x_field)
        positive = all(x > 0 for x in pdata.x_order)
        if plot.get("logx") and positive:
            ax.set_xscale("log", base=2 if size or _powers_of_two(pdata.x_order) else 10)
            if len(pdata.x_order) <= 16:
                ax.xaxis.set_major_locator(ticker.FixedLocator(pdata.x_order))
                ax.xaxis.set_minor_locator(ticker.NullLocator())
        elif len(pdata.x_order) <= 16:
            # Counts (requesters, threads): ticks at the measured values, not at 1.2, 1.4.
            ax.xaxis.set_major_locator(ticker.FixedLocator(pdata.x_order))
        formatter = (lambda v, _: D.format_size(v)) if size else (lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(formatter))
    if plot.get("logy"):
        ax.set_yscale("log", nonpositive="mask")
    else:
        _plain_y_ticks(ax)


def _plain_y_ticks(ax):
    """Linear y ticks as 12M, 2.5k: no offset or exponent printed above the axis."""
    import matplotlib.ticker as ticker
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: D.format_tick(v)))


def _powers_of_two(values):
    return all(float(v).is_integer() and int(v) & (int(v) - 1) == 0 for v in values)


def _labels(ax, plot, pdata):
    ax.set_xlabel(plot.get("xlabel") or pdata.x_field)
    ax.set_ylabel(plot.get("ylabel") or pdata.y_field)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)


def _legend(ax, pdata):
    if not pdata.series_fields:
        return
    title = D.field_title(pdata.series_fields)
    if len(pdata.series_order) > _LEGEND_INSIDE:
        ax.legend(title=title, fontsize=6, title_fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), ncol=2 if len(pdata.series_order) > 20 else 1)
    else:
        ax.legend(title=title, fontsize=7, title_fontsize=8)


def table_rows(plot, pdata):
    """Header and text rows of the aggregated points (also used for the page)."""
    header = list(pdata.series_fields) + [plot.get("xlabel") or pdata.x_field,
                                          "median", "min", "max", "n"]
    rows = []
    for p in pdata.points:
        rows.append([D.series_label((v,), (f,)) if v is not None else "-"
                     for v, f in zip(p.series, pdata.series_fields)] +
                    [D.format_x(p.x, pdata.x_field), _short(p.median), _short(p.low),
                     _short(p.high), str(p.n)])
    return header, rows


def _short(value):
    """Compact number text for table cells."""
    if float(value).is_integer() and abs(value) < 1e12:
        return str(int(value))
    if abs(value) >= 1e5:
        return f"{value:.0f}"
    return f"{value:.4g}"


def _table_figure(plt, exp, pdata):
    header, rows = table_rows(exp.plot, pdata)
    height = 0.26 * (len(rows) + 1)
    # As wide as the longest cell of each column needs (design names are long).
    widths = [max(4, max(len(str(r[i])) for r in [header] + rows)) for i in range(len(header))]
    fig, ax = plt.subplots(figsize=(max(FIGSIZE[0], 0.075 * sum(widths) + 0.5), height))
    ax.axis("off")
    total = float(sum(widths))
    table = ax.table(cellText=rows, colLabels=header, cellLoc="center", bbox=[0, 0, 1, 1],
                     colWidths=[w / total for w in widths])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (r, _), cell in table.get_celld().items():
        if r == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#e8e8e8")
    ylabel = exp.plot.get("ylabel") or pdata.y_field
    ax.text(0.0, -0.1 / height, f"values: {ylabel}", transform=ax.transAxes, fontsize=8, va="top")
    return fig


def _empty_figure(plt, why):
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, textwrap.fill(f"no data: {why}", width=60), ha="center", va="center",
            transform=ax.transAxes, fontsize=10, color="#555555")
    return fig
