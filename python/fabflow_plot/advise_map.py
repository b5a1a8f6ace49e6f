"""The map of `fabflow advise FAMILY --map BASE`: which design wins each cell of a grid of
workloads on this machine (rows: the sizes of -S; columns: the objectives, or with --vary the
values of one bench flag).

Each cell is coloured by its winning design, one colour per design across the whole map, and
hatched when the winner is tied with another candidate within the runs' spread (the cell then
also says how many it is tied with). A cell whose search failed is grey and says so.
"""

import json

from . import data as D
from . import figure as F

_TIED_HATCH = "////"
_FAILED = "0.85"


def load(path):
    """The map object of BASE.json, checked; raises FabflowError when it is not a map."""
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise D.FabflowError(f"{path}: not an advise map ({e})") from None
    if not isinstance(m, dict) or m.get("type") != "advice_map":
        raise D.FabflowError(f"{path}: not an advise map (no \"type\": \"advice_map\")")
    for key in ("sizes", "objectives", "cells"):
        if not isinstance(m.get(key), list) or not m[key]:
            raise D.FabflowError(f"{path}: an advise map needs a non-empty '{key}' list")
    vary = m.get("vary")
    if vary is not None and (not isinstance(vary, dict) or not isinstance(vary.get("flag"), str)
                             or not isinstance(vary.get("values"), list) or not vary["values"]):
        raise D.FabflowError(f"{path}: 'vary' needs a 'flag' and a non-empty 'values' list")
    cols = columns(m)
    for cell in m["cells"]:
        if (not isinstance(cell, dict) or cell.get("size") not in m["sizes"]
                or column_of(m, cell) not in cols
                or not isinstance(cell.get("answer"), dict)):
            raise D.FabflowError(f"{path}: a cell that is not on the map's grid: {cell!r:.120}")
    return m


def columns(m):
    """The map's columns: the varied flag's values, or the objectives."""
    return m["vary"]["values"] if m.get("vary") else m["objectives"]


def column_of(m, cell):
    """The column a cell is in."""
    return cell.get("vary") if m.get("vary") else cell.get("objective")


def winner_of(answer):
    """(design, provider, ties) of a cell's answer, or None when it has no winner."""
    ranked = answer.get("ranked")
    if "failed" in answer or not answer.get("winner") or not isinstance(ranked, list) or not ranked:
        return None
    first = ranked[0]
    return str(first.get("design")), str(first.get("provider")), len(answer.get("ties") or [])


def colours(designs):
    """One colour per design (tab10, then tab20), in the order given."""
    palette = [f"C{i}" for i in range(10)]
    if len(designs) > 10:
        import matplotlib
        palette = [matplotlib.colormaps["tab20"](i) for i in range(20)]
    return {d: palette[i % len(palette)] for i, d in enumerate(designs)}


def cells_drawn(m):
    """[(row, col, facecolour, hatch, label)] for every cell of a loaded map, and the legend's
    designs in order."""
    sizes, cols = m["sizes"], columns(m)
    cells = {(c["size"], column_of(m, c)): c["answer"] for c in m["cells"]}
    designs = []
    for c in m["cells"]:
        w = winner_of(c["answer"])
        if w and w[0] not in designs:
            designs.append(w[0])
    colour = colours(designs)
    providers = {w[1] for w in (winner_of(a) for a in cells.values()) if w}
    drawn = []
    for row, size in enumerate(sizes):
        for col, column in enumerate(cols):
            answer = cells.get((size, column))
            w = winner_of(answer) if answer is not None else None
            if w is None:
                why = (answer or {}).get("failed", "not measured")
                drawn.append((row, col, _FAILED, None, "no answer\n" + str(why)[:40]))
                continue
            design, provider, ties = w
            label = design if len(providers) == 1 else f"{design}\non {provider}"
            if ties:
                label += f"\ntied with {ties}"
            drawn.append((row, col, colour[design], _TIED_HATCH if ties else None, label))
    return drawn, designs, colour


def render(path, base):
    """Write BASE.png and BASE.svg; return their paths."""
    m = load(path)
    sizes, cols = m["sizes"], columns(m)
    vary = m.get("vary")
    drawn, designs, colour = cells_drawn(m)

    plt = F.load_pyplot()
    from matplotlib.patches import Patch, Rectangle
    fig, ax = plt.subplots(figsize=(2.0 + 2.3 * len(cols), 1.6 + 0.8 * len(sizes)),
                           dpi=F.DPI)
    for row, col, face, hatch, label in drawn:
        failed = face == _FAILED
        ax.add_patch(Rectangle((col, row), 1, 1, facecolor=face, edgecolor="white", hatch=hatch,
                               alpha=1.0 if failed else 0.85))
        ax.text(col + 0.5, row + 0.5, label, ha="center", va="center",
                fontsize=7 if failed else 8, color="0.3" if failed else "black",
                bbox=None if failed else {"facecolor": "white", "alpha": 0.7, "linewidth": 0,
                                          "boxstyle": "round,pad=0.2"})
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(sizes), 0)
    ax.set_xticks([i + 0.5 for i in range(len(cols))])
    ax.set_xticklabels(cols)
    ax.set_yticks([i + 0.5 for i in range(len(sizes))])
    ax.set_yticklabels(sizes)
    ax.set_xlabel(f"{vary['flag']} ({m['objectives'][0]})" if vary else "objective")
    ax.set_ylabel("size (-S)")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [Patch(facecolor=colour[d], label=d) for d in designs]
    handles.append(Patch(facecolor="white", edgecolor="0.3", hatch=_TIED_HATCH,
                         label="tied within the runs' spread"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False, title="winning design")
    provider_text = ", ".join(m["providers"]) if isinstance(m["providers"], list) else m["providers"]
    what = vary["flag"] if vary else "objective"
    passive = f", {m['passive']} passive" if isinstance(m.get("passive"), str) else ""
    ax.set_title(f"advise {m.get('family', '?')}: the winner per size and {what}\n"
                 f"providers {provider_text}{passive}, {m.get('cell_budget_s', '?')} s per cell",
                 fontsize=9, loc="left")
    png, svg = f"{base}.png", f"{base}.svg"
    try:
        fig.savefig(png, dpi=F.DPI, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(svg, bbox_inches="tight", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(fig)
    return [png, svg]
