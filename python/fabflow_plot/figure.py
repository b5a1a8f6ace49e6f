"""Drawing an experiment's figure (PNG and SVG) with matplotlib.

matplotlib is imported only when a figure is drawn, with the non-interactive
Agg backend and fixed metadata so that the same data gives the same files.
Kinds: "line" (one line per series, error bars min..max over repeats),
"bar" (grouped bars, one per series at each x category, always on a linear
axis) and "table" (the aggregated numbers as a table image).

A reader takes a figure in at a glance when one property of the line says one
thing: every series field but one picks the colour, the plot's "style" field
(and a y_extra quantity) picks the line style and marker (a bar's hatch), and
"panels" draws one small plot per value of a field. Refused series and the
row groups the claim needs but the run lacks are written under the plot.
"""

import dataclasses
import textwrap

from . import data as D

DPI = 110
FIGSIZE = (7.0, 4.5)
PANEL_SIZE = (3.4, 3.1)
_LEGEND_INSIDE = 8  # more legend entries than this: the legend moves to the right
_NOTES_SHOWN = 5  # notes under the plot before "and N more"

_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"),
           ((0, (3, 1, 1, 1, 1, 1)), "P"), ((0, (1, 3)), "X"), ((0, (8, 2, 2, 2)), "*"))
_HATCHES = ("", "////", "....", "xxxx", "\\\\\\\\", "oo", "--", "++")
_NEUTRALS = ("0.15", "0.45", "0.6", "0.3")  # y_extra curves of their own


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
    matplotlib.rcParams["hatch.linewidth"] = 0.6
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
    notes = list(pdata.missing)
    if not pdata.points and not any(e.points for e in pdata.extras if not e.reference):
        fig = _empty_figure(plt, pdata.empty_reason or "nothing to plot")
    elif kind == "table":
        fig = _table_figure(plt, exp, pdata)
    else:
        curves, keys = build_curves(exp.plot, pdata)
        panels = keys.panels or [None]
        fig, axes = _axes(plt, len(panels))
        spread = any(p.n > 1 for c in curves for p in c.points)
        for ax, panel in zip(axes, panels):
            mine = [c for c in curves if c.panel is None or c.panel == panel]
            if kind == "bar":
                _bars(ax, exp.plot, pdata, mine, keys, spread)
            else:
                _lines(ax, exp.plot, pdata, mine, keys, spread)
            _labels(ax, exp.plot, pdata, panelled=panel is not None)
            if panel is not None:
                ax.set_title(panel_title(pdata, keys.panel_field, panel), fontsize=8)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        if len(panels) > 1:
            fig.supxlabel(exp.plot.get("xlabel") or pdata.x_field, fontsize=9)
            fig.supylabel(exp.plot.get("ylabel") or pdata.y_field, fontsize=9)
        _legend(fig, axes[:len(panels)], keys, kind, outside=len(panels) > 1)
        notes.insert(0, spread_note(curves, kind))
    first, second = title_text(exp)
    if kind != "table" and exp.plot.get("panels") and fig.axes[0].get_title():
        fig.suptitle(f"{first}\n{second}", fontsize=9, x=0.02, ha="left")
    else:
        fig.axes[0].set_title(f"{first}\n{second}", fontsize=9, loc="left")
    _notes(fig, [n for n in notes if n])
    try:
        fig.savefig(png_path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(svg_path, bbox_inches="tight", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(fig)


# --- what each curve looks like ---------------------------------------------------

@dataclasses.dataclass
class Curve:
    """One drawn line (or one bar per x): its points and the keys of its look."""

    points: list
    colour: tuple  # the values of the colour fields (or the y_extra's own key)
    style: tuple  # the style field's value and/or the quantity's name; () = the first style
    panel: object  # the panel field's value; None = every panel
    own: bool = False  # a y_extra curve with series of its own (neutral colour)
    label: str = ""  # its colour entry's text


@dataclasses.dataclass
class Keys:
    """The first-seen order of colours, styles and panels, and the fields behind them."""

    colour_fields: list
    style_field: object
    panel_field: object
    colours: list  # colour keys of the series (not of y_extra curves of their own)
    own: list  # colour keys of y_extra curves of their own
    styles: list
    panels: list
    colour_labels: dict
    style_labels: dict
    colour_title: str = ""
    style_title: str = ""
    by_index: bool = False  # more colours than the palette and no style: styles step every 10

    def colour(self, curve):
        if curve.own:
            return _NEUTRALS[self.own.index(curve.colour) % len(_NEUTRALS)]
        return f"C{self.colours.index(curve.colour) % 10}"

    def style_index(self, curve):
        if curve.own:
            return (1 + self.own.index(curve.colour)) % len(_STYLES)
        if self.by_index:
            return (self.colours.index(curve.colour) // 10) % len(_STYLES)
        return self.styles.index(curve.style) % len(_STYLES) if curve.style in self.styles else 0


def style_field(plot, pdata):
    """The series field drawn as line style: plot.style, else the last of two or more series
    fields when the series outnumber the palette's ten colours (and no panels split them)."""
    if plot.get("style"):
        return plot["style"]
    if plot.get("panels") or len(pdata.series_fields) < 2 or len(pdata.series_order) <= 10:
        return None
    return pdata.series_fields[-1]


def build_curves(plot, pdata):
    """The curves of the main y and of every y_extra, and the order of their looks."""
    fields = pdata.series_fields
    style, panel = style_field(plot, pdata), plot.get("panels")
    index = {f: i for i, f in enumerate(fields)}
    colour_fields = [f for f in fields if f not in (style, panel)]
    measure_style = any(e.per_series for e in pdata.extras)

    def looks(key, measure):
        colour = tuple(key[index[f]] for f in colour_fields)
        look = ((key[index[style]],) if style else ()) + ((measure,) if measure_style else ())
        return colour, look, (key[index[panel]] if panel else None)

    def text(colour):  # no colour fields (one series): the curve is named by its quantity
        return pdata.series_text(colour, colour_fields) if colour_fields else pdata.y_name

    curves = []
    for key in pdata.series_order:
        colour, look, where = looks(key, pdata.y_name)
        curves.append(Curve([p for p in pdata.points if p.series == key], colour, look, where,
                            label=text(colour)))
    for extra in pdata.extras:
        for key in extra.series_order:
            pts = [p for p in extra.points if p.series == key]
            if extra.per_series:
                colour, look, where = looks(key, extra.label)
                curves.append(Curve(pts, colour, look, where, label=text(colour)))
            else:
                text = pdata.series_text(key, extra.series_fields) if key else ""
                label = f"{extra.label}, {text}" if text else extra.label
                where = key[extra.series_fields.index(panel)] if panel in extra.series_fields else None
                curves.append(Curve(pts, ("y_extra", extra.field, key), (), where, own=True, label=label))
    colours, own, styles, panels = [], [], [], []
    colour_labels, style_labels = {}, {}
    for c in curves:
        group = own if c.own else colours
        if c.colour not in group:
            group.append(c.colour)
            colour_labels[c.colour] = c.label
        if c.style and c.style not in styles:
            styles.append(c.style)
            style_labels[c.style] = _style_text(pdata, style, c.style)
        if c.panel is not None and c.panel not in panels:
            panels.append(c.panel)
    if panel:
        panels = _sorted_like_values(panels)
    style_title = ", ".join(([D.field_name(style, pdata.names)] if style else []) +
                            (["quantity"] if measure_style else []))
    keys = Keys(colour_fields, style, panel, colours, own, styles, panels, colour_labels,
                style_labels, colour_title=pdata.field_text(colour_fields) if colour_fields else "",
                style_title=style_title)
    keys.by_index = not styles and len(colours) > 10
    return curves, keys


def _sorted_like_values(values):
    numbers = [D.to_number(v, size=True) for v in values]
    if all(n is not None for n in numbers):
        return [v for _, v in sorted(zip(numbers, values), key=lambda t: t[0])]
    return values


def _style_text(pdata, style, look):
    parts = []
    if style:
        parts.append(pdata.series_text(look[:1], [style]))
        look = look[1:]
    parts += [str(v) for v in look]
    return ", ".join(parts)


def panel_title(pdata, field, value):
    text = pdata.series_text((value,), [field])
    name = D.field_name(field, pdata.names)
    return text if text.startswith(name) else f"{name} {text}"


def spread_note(curves, kind):
    """How to read a point: the median of its repeats and what the error bar spans."""
    counts = sorted({p.n for c in curves for p in c.points})
    if not counts:
        return ""
    what = "bar" if kind == "bar" else "point"
    if counts[-1] <= 1:
        return f"each {what}: one run (no repeats, so no error bars)"
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"each {what}: the median of {n} repeats; error bars: min to max"


# --- kinds -----------------------------------------------------------------------

def _axes(plt, count):
    """One axes, or a row (or two) of small multiples sharing the y axis."""
    if count <= 1:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        return fig, [ax]
    cols = {1: 1, 2: 2, 3: 3, 4: 2}.get(count, 3 if count <= 6 else 4)
    rows = (count + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(PANEL_SIZE[0] * cols, PANEL_SIZE[1] * rows + 0.6),
                             sharey=True, squeeze=False)
    return fig, [ax for row in grid for ax in row]


def _positions(pdata):
    """x position of every x value: the value itself, or its index when categorical."""
    if pdata.x_numeric:
        return {x: x for x in pdata.x_order}
    return {x: i for i, x in enumerate(pdata.x_order)}


def _lines(ax, plot, pdata, curves, keys, spread):
    pos = _positions(pdata)
    for curve in curves:
        pts = [p for p in curve.points if p.x in pos]
        if not pts:
            continue
        linestyle, marker = _STYLES[keys.style_index(curve)]
        look = dict(color=keys.colour(curve), linestyle=linestyle, marker=marker,
                    markersize=4, linewidth=1.3)
        xs = [pos[p.x] for p in pts]
        ys = [p.median for p in pts]
        if spread:
            err = [[p.median - p.low for p in pts], [p.high - p.median for p in pts]]
            ax.errorbar(xs, ys, yerr=err, capsize=3, elinewidth=0.9, **look)
        else:
            ax.plot(xs, ys, **look)
    _x_ticks(ax, plot, pdata)


def _bars(ax, plot, pdata, curves, keys, spread):
    """Grouped bars on a linear y axis (a bar's length is its value; plot.logy is not used)."""
    categories = pdata.x_order
    # Side by side: each series' quantities (p50, p99) next to each other.
    curves = sorted(curves, key=lambda c: (c.own, (keys.own if c.own else keys.colours).index(c.colour),
                                           keys.style_index(c)))
    count = max(1, len(curves))
    width = 0.8 / count
    for i, curve in enumerate(curves):
        by_x = {p.x: p for p in curve.points}
        xs, ys, lows, highs = [], [], [], []
        for c, x in enumerate(categories):
            if x in by_x:
                p = by_x[x]
                xs.append(c - 0.4 + width * (i + 0.5))
                ys.append(p.median)
                lows.append(p.median - p.low)
                highs.append(p.high - p.median)
        hatch = _HATCHES[keys.style_index(curve) % len(_HATCHES)]
        ax.bar(xs, ys, width=width * 0.92, color=keys.colour(curve), hatch=hatch or None,
               edgecolor="white" if hatch else None, linewidth=0,
               yerr=[lows, highs] if spread else None, capsize=2 if spread else 0,
               error_kw={"elinewidth": 0.9})
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels([pdata.x_text(x) for x in categories],
                       rotation=30 if len(categories) > 6 else 0,
                       ha="right" if len(categories) > 6 else "center")
    ax.set_ylim(bottom=0)
    _plain_y_ticks(ax)


def _x_ticks(ax, plot, pdata):
    """Log scales as asked; ticks at the measured x values where that is readable."""
    import matplotlib.ticker as ticker
    if not pdata.x_numeric:
        ax.set_xticks(range(len(pdata.x_order)))
        ax.set_xticklabels([pdata.x_text(x) for x in pdata.x_order],
                           rotation=30 if len(pdata.x_order) > 6 else 0,
                           ha="right" if len(pdata.x_order) > 6 else "center")
    else:
        size = D.is_size_field(pdata.x_field)
        positive = all(x > 0 for x in pdata.x_order)
        ticks = _thinned(pdata.x_order)
        if plot.get("logx") and positive:
            ax.set_xscale("log", base=2 if size or _powers_of_two(pdata.x_order) else 10)
            if len(pdata.x_order) <= 16:
                ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
                ax.xaxis.set_minor_locator(ticker.NullLocator())
        elif len(pdata.x_order) <= 16:
            # Counts (requesters, threads): ticks at the measured values, not at 1.2, 1.4.
            ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _x_tick_text(pdata, v, size)))
    if plot.get("logy"):
        _log_y(ax)
    else:
        _plain_y_ticks(ax)


def _x_tick_text(pdata, value, size):
    word = D._label_for(pdata.labels, pdata.x_field, float(value))
    if word is not None:
        return word
    if size:
        return D.format_size(value)
    return f"{value:g}" if abs(value) < 1e5 else D.format_tick(value)


def _thinned(values, most=9):
    """At most about `most` tick positions: every k-th measured value, the last one kept."""
    if len(values) <= most:
        return list(values)
    step = -(-len(values) // most)
    kept = list(values[::step])
    if kept[-1] != values[-1]:
        kept[-1] = values[-1]
    return kept


def _plain_y_ticks(ax):
    """Linear y ticks as 12M, 2.5k: no offset or exponent printed above the axis."""
    import matplotlib.ticker as ticker
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: D.format_tick(v)))


_NARROW = 0.6  # a log axis spanning fewer decades gets evenly spaced ticks, every one labelled


def _log_y(ax):
    """A log y axis labelled 1, 10, 100, 1k (and 2, 5 between when it spans few decades;
    evenly spaced ticks, 800, 1k, 1.2k, when it spans less than _NARROW decades)."""
    ax.set_yscale("log", nonpositive="mask")
    readable_log_axis(ax.yaxis)


def readable_log_axis(axis):
    """Locators and formatters of a readable log axis (also the CDFs' latency axes)."""
    major, minor, formatter = _readable_log_classes()
    axis.set_major_locator(major())
    axis.set_minor_locator(minor())
    axis.set_major_formatter(formatter())
    axis.set_minor_formatter(formatter())


def _decades(axis):
    import math
    low, high = sorted(axis.get_view_interval())
    return math.log10(high / low) if low > 0 and high > 0 else None


_READABLE_LOG = None


def _readable_log_classes():
    """(major locator, minor locator, formatter) classes, made once matplotlib is loaded."""
    global _READABLE_LOG
    if _READABLE_LOG is not None:
        return _READABLE_LOG
    import math
    import matplotlib.ticker as ticker

    def narrow(axis):
        decades = _decades(axis)
        return decades is not None and decades < _NARROW

    class Major(ticker.Locator):
        def __init__(self):
            self.log = ticker.LogLocator(base=10)
            self.even = ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10])

        def set_axis(self, axis):
            super().set_axis(axis)
            self.log.set_axis(axis)
            self.even.set_axis(axis)

        def __call__(self):
            low, high = self.axis.get_view_interval()
            return self.tick_values(low, high)

        def tick_values(self, vmin, vmax):
            if narrow(self.axis):
                return [v for v in self.even.tick_values(vmin, vmax) if v > 0]
            return self.log.tick_values(vmin, vmax)

    class Minor(Major):
        def __init__(self):
            super().__init__()
            self.log = ticker.LogLocator(base=10, subs="auto")

        def tick_values(self, vmin, vmax):
            return [] if narrow(self.axis) else self.log.tick_values(vmin, vmax)

    class Formatter(ticker.Formatter):
        """Decades always; 2 and 5 between them over less than 2.5 decades; every
        multiple over less than 0.7; every tick when narrow. Text as D.format_tick."""

        def __call__(self, value, pos=None):
            if value <= 0:
                return ""
            decades = _decades(self.axis) if self.axis is not None else None
            if decades is not None and decades < _NARROW:
                return D.format_tick(value)
            wanted = ({1} if decades is None or decades > 2.5 else {1, 2, 5} if decades > 0.7
                      else set(range(1, 10)))
            exponent = math.floor(math.log10(value) + 1e-9)
            coefficient = round(value / 10 ** exponent)
            if abs(value / 10 ** exponent - coefficient) > 1e-6 or coefficient not in wanted:
                return ""
            return D.format_tick(coefficient * 10.0 ** exponent)

    _READABLE_LOG = (Major, Minor, Formatter)
    return _READABLE_LOG


def _powers_of_two(values):
    return all(float(v).is_integer() and int(v) & (int(v) - 1) == 0 for v in values)


def _labels(ax, plot, pdata, panelled=False):
    """Axis labels on a lone plot (small multiples share the figure's)."""
    if not panelled or len(ax.figure.axes) == 1:
        ax.set_xlabel(plot.get("xlabel") or pdata.x_field)
        ax.set_ylabel(plot.get("ylabel") or pdata.y_field)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    if plot.get("logy") and plot.get("kind") != "bar":
        ax.grid(True, which="minor", linewidth=0.3, alpha=0.25)


def legend_entries(keys):
    """The legend, in order, as (what, key, text): "heading" lines (bold), the "colour" of each
    series (under the colour fields' names), each "style" (under the style's name), then the
    y_extra curves of their own ("own"). One colour only: its styles are drawn in it."""
    entries = []
    sections = bool(keys.styles) and len(keys.colours) > 1
    if not keys.styles or len(keys.colours) > 1:
        if sections and keys.colour_title:
            entries.append(("heading", None, keys.colour_title))
        entries += [("colour", c, keys.colour_labels[c]) for c in keys.colours]
    if keys.styles:
        if sections and keys.style_title:
            entries.append(("heading", None, keys.style_title))
        entries += [("style", s, keys.style_labels[s]) for s in keys.styles]
    entries += [("own", c, keys.colour_labels[c]) for c in keys.own]
    return entries


def legend_title(keys):
    """The legend's title when it has no headings."""
    if keys.styles and len(keys.colours) > 1:
        return None
    return keys.style_title if keys.styles else keys.colour_title


def _handle(keys, what, key, kind):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    if what == "heading":
        return Line2D([], [], linestyle="none")
    if what == "colour":
        curve = Curve([], key, (), None)
    elif what == "own":
        curve = Curve([], key, (), None, own=True)
    else:
        single = keys.colours[0] if len(keys.colours) == 1 else None
        curve = Curve([], single, key, None)
    colour = keys.colour(curve) if curve.colour is not None else "0.25"
    index = 0 if what == "colour" else keys.style_index(curve)
    if kind == "bar":
        hatch = _HATCHES[index % len(_HATCHES)]
        face = "white" if what == "style" and curve.colour is None else colour
        return Patch(facecolor=face, hatch=hatch or None, linewidth=0.6,
                     edgecolor="0.3" if face == "white" else "white")
    linestyle, marker = _STYLES[index]
    return Line2D([], [], color=colour, linestyle=linestyle, marker=marker, markersize=4,
                  linewidth=1.3)


def _legend(fig, axes, keys, kind, outside=False):
    entries = legend_entries(keys)
    if not entries or (len(entries) == 1 and not legend_title(keys)):
        return
    handles = [_handle(keys, what, key, kind) for what, key, _ in entries]
    texts = [text for _, _, text in entries]
    many = len(entries) > _LEGEND_INSIDE or outside or any(e[0] == "heading" for e in entries)
    options = dict(fontsize=7, title=legend_title(keys), title_fontsize=8, handlelength=2.8)
    if many:
        # Beside the top right plot.
        corner = max(axes, key=lambda a: (round(a.get_position().y1, 3), a.get_position().x0))
        legend = corner.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                                 ncol=2 if len(entries) > 22 else 1, **options)
    else:
        legend = axes[0].legend(handles, texts, **options)
    for (what, _, _), text in zip(entries, legend.get_texts()):
        if what == "heading":
            text.set_fontweight("bold")


def _notes(fig, notes):
    """The notes, wrapped, under everything else the figure shows (inside the saved area)."""
    if not notes:
        return
    shown = notes[:_NOTES_SHOWN]
    if len(notes) > _NOTES_SHOWN:
        shown.append(f"and {len(notes) - _NOTES_SHOWN} more (see the page)")
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    everything = fig.get_tightbbox(renderer)  # inches: the shared axis labels too
    bottom = min(everything.y0 / fig.get_size_inches()[1], min(b.y0 for b in boxes) / fig.bbox.height)
    left = min(b.x0 for b in boxes) / fig.bbox.width
    width = int(max(60, 15 * fig.get_size_inches()[0]))
    text = "\n".join(textwrap.fill(n, width=width, subsequent_indent="  ") for n in shown)
    fig.text(max(0.0, left), bottom - 0.01, text, ha="left", va="top", fontsize=7, color="#444444")


# --- tables ----------------------------------------------------------------------

def _short(value):
    """Compact number text for table cells."""
    if float(value).is_integer() and abs(value) < 1e12:
        return str(int(value))
    if abs(value) >= 1e5:
        return f"{value:.0f}"
    return f"{value:.4g}"


def _cell(point, spread):
    if point is None:
        return "-"
    if spread and point.n > 1:
        return f"{_short(point.median)} ({_short(point.low)}-{_short(point.high)})"
    return _short(point.median)


def _extra_lookup(pdata):
    """For each y_extra that a table can show (its own series none, or the plot's): a function
    from a main point's (series, x) to its point."""
    out = []
    for extra in pdata.extras:
        if extra.per_series:
            table = {(p.series, p.x): p for p in extra.points}
            out.append((extra, lambda s, x, t=table: t.get((s, x))))
        elif not extra.series_fields:
            table = {p.x: p for p in extra.points}
            out.append((extra, lambda s, x, t=table: t.get(x)))
    return out


def refused_series(pdata):
    """The series that only refused rows have, each with its word: "not offered" where the
    provider refused the point's endpoint type (the runner's refused_point), else "refused"."""
    out = {}
    for row in pdata.refused_rows:
        key = D.series_key(row, pdata.series_fields)
        if key in pdata.series_order or all(v is None for v in key):
            continue
        out.setdefault(key, "not offered" if row.get("refused_point") else "refused")
    return list(out.items())


def table_rows(plot, pdata):
    """(header, text rows, index of the first numeric column) of the aggregated points, as the
    table figure and the page show them. plot.layout "long" (default): one row per series and
    x, the value and (with repeats) its min and max, a column per y_extra, n. "wide": one row
    per series and one column per x (and per y_extra at that x), "median (min-max)" cells.
    A series of refused rows only is a row too, its value "not offered" (or "refused")."""
    spread = any(p.n > 1 for p in pdata.points)
    extras = _extra_lookup(pdata)
    names = [D.field_name(f, pdata.names) for f in pdata.series_fields]
    by_key = {(p.series, p.x): p for p in pdata.points}
    if plot.get("layout") == "wide":
        header = list(names)
        columns = []
        for x in pdata.x_order:
            if any((s, x) in by_key for s in pdata.series_order):
                columns.append((pdata.x_text(x), x, None))
            for extra, find in extras:
                if any(find(s, x) is not None for s in pdata.series_order):
                    columns.append((f"{pdata.x_text(x)}\n{extra.label}", x, find))
        header += [c[0] for c in columns]
        rows = []
        for s in pdata.series_order:
            row = [pdata.series_text((v,), (f,)) if v is not None else "-"
                   for v, f in zip(s, pdata.series_fields)]
            for _, x, find in columns:
                row.append(_cell(by_key.get((s, x)) if find is None else find(s, x), spread))
            rows.append(row)
        for s, word in refused_series(pdata):
            rows.append([pdata.series_text((v,), (f,)) if v is not None else "-"
                         for v, f in zip(s, pdata.series_fields)] + [word] * len(columns))
        return header, rows, len(names)
    value = plot.get("y_name") or "median"
    header = names + [plot.get("xlabel") or pdata.x_field, value]
    if spread:
        header += ["min", "max"]
    header += [extra.label for extra, _ in extras] + ["n"]
    rows = []
    for p in pdata.points:
        row = [pdata.series_text((v,), (f,)) if v is not None else "-"
               for v, f in zip(p.series, pdata.series_fields)]
        row += [pdata.x_text(p.x), _short(p.median)]
        if spread:
            row += [_short(p.low), _short(p.high)]
        row += [_cell(find(p.series, p.x), False) for _, find in extras]
        rows.append(row + [str(p.n)])
    for s, word in refused_series(pdata):
        row = [pdata.series_text((v,), (f,)) if v is not None else "-"
               for v, f in zip(s, pdata.series_fields)]
        rows.append(row + ["-", word] + ["-"] * (len(header) - len(row) - 2))
    return header, rows, len(names) + 1


def _table_figure(plt, exp, pdata):
    header, rows, _ = table_rows(exp.plot, pdata)
    header_lines = max(str(h).count("\n") + 1 for h in header)
    height = 0.26 * (len(rows) + header_lines)
    # As wide as the longest line of each column needs (design names are long; the header is
    # bold, so its characters count a little more).
    widths = [max(4, max([len(str(r[i])) for r in rows] +
                         [1.15 * len(line) for line in str(header[i]).split("\n")]))
              for i in range(len(header))]
    fig, ax = plt.subplots(figsize=(max(FIGSIZE[0], 0.08 * sum(widths) + 0.5), height))
    ax.axis("off")
    total = float(sum(widths))
    table = ax.table(cellText=rows, colLabels=header, cellLoc="center", bbox=[0, 0, 1, 1],
                     colWidths=[w / total for w in widths])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    cells = table.get_celld()
    for (r, _), cell in cells.items():
        if r == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#e8e8e8")
            cell.set_height(cell.get_height() * header_lines)
    ylabel = exp.plot.get("ylabel") or pdata.y_field
    counts = sorted({p.n for p in pdata.points})
    if counts and counts[-1] > 1:
        n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        how = (f"median (min-max) of {n} repeats" if exp.plot.get("layout") == "wide"
               else f"median, min and max of {n} repeats")
    else:
        how = "one run per cell"
    ax.text(0.0, -0.1 / height, f"values: {ylabel}; {how}", transform=ax.transAxes,
            fontsize=8, va="top")
    return fig


def _empty_figure(plt, why):
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, textwrap.fill(f"no data: {why}", width=60), ha="center", va="center",
            transform=ax.transAxes, fontsize=10, color="#555555")
    return fig
