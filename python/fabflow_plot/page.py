"""HTML pages: one per experiment (DIR/ID.html) and the report index.

Pages are self-contained: the PNG figure is embedded as a base64 data URI and
the style sheet is inline, so a page can be mailed or archived on its own.
"""

import base64
import html
import os
import json

from . import claims as C
from . import data as D
from . import figure as F

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem;
       color: #1f2328; line-height: 1.4; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 1.6rem; }
table { border-collapse: collapse; margin: .5rem 0; font-size: .9rem; }
th, td { border: 1px solid #d0d7de; padding: .2rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; height: auto; }
pre { background: #f6f8fa; padding: .5rem; overflow-x: auto; font-size: .85rem; }
.verdict { display: inline-block; padding: .15rem .6rem; border-radius: .3rem; color: #fff;
           font-weight: 600; }
.holds { background: #1a7f37; } .fails { background: #c62828; } .unmeasurable { background: #6b7280; }
.inconclusive { background: #b45309; }
.detail { font-family: ui-monospace, monospace; font-size: .85rem; }
.caption { color: #444; }
blockquote { margin: .4rem 1.5rem; color: #333; font-style: italic; }
.place { font-style: normal; color: #666; font-size: .9rem; }
.fidelity { font-size: .95rem; }
section.experiment { border-top: 2px solid #d0d7de; margin-top: 2rem; }
table.index td { font-size: .85rem; }
img.thumb { width: 200px; max-width: none; }
.small { color: #555; font-size: .8rem; }
tr.differs td, td.busy, p.busy { background: #fff4e5; }
"""

_VERDICT_CLASS = {C.HOLDS: "holds", C.FAILS: "fails", C.UNMEASURABLE: "unmeasurable",
                  C.SUBSTITUTE_HOLDS: "holds", C.SUBSTITUTE_FAILS: "fails",
                  C.INCONCLUSIVE: "inconclusive"}


def esc(value):
    return html.escape(str(value), quote=True)


def _text(value):
    """Cell text for any JSON value."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def document(title, body):
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
            f"{body}\n</body>\n</html>\n")


def png_data_uri(png_bytes):
    return "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")


def verdict_html(verdict):
    cls = _VERDICT_CLASS.get(verdict.verdict, "unmeasurable")
    return (f"<p><span class=\"verdict {cls}\">{esc(verdict.verdict)}</span></p>\n"
            f"<p class=\"detail\">{esc(verdict.detail)}</p>")


def table(header, rows, numeric_from=None):
    """An HTML table; columns from numeric_from on are right-aligned."""
    out = ["<table>", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = " class=\"num\"" if numeric_from is not None and i >= numeric_from else ""
            cells.append(f"<td{cls}>{esc(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def claim_html(exp, verdict, level=2):
    claim = exp.entry.get("claim") or {}
    parts = [f"<h{level}>Claim</h{level}>"]
    if claim.get("text"):
        parts.append(f"<p>{esc(claim['text'])}</p>")
    paper = claim.get("paper")
    if isinstance(paper, dict) and paper.get("quote"):
        parts.append(f"<blockquote>&ldquo;{esc(paper['quote'])}&rdquo; "
                     f"<span class=\"place\">({esc(paper.get('place', ''))})</span></blockquote>")
    parts.append(fidelity_html(exp.entry))
    if claim.get("check") is not None:
        parts.append(f"<pre>{esc(json.dumps(claim['check'], sort_keys=True))}</pre>")
    parts.append(verdict_html(verdict))
    return "\n".join(parts)


def fidelity_html(entry):
    """One line: how closely the entry reproduces the paper's experiment, and the note."""
    kind = C.fidelity(entry)
    note = (entry.get("fidelity") or {}).get("note", "") if isinstance(entry.get("fidelity"), dict) else ""
    text = {"faithful": "Faithful: the paper's quantity and claim",
            "substitute": "Substitute: not the paper's own mechanism",
            "not_measurable": "Not measurable here"}.get(kind, kind)
    return f"<p class=\"fidelity\"><b>{esc(text)}</b>{esc('. ' + note if note else '.')}</p>"


def figure_html(exp, png_bytes, svg_name):
    img = (f"<img alt=\"figure {esc(exp.id)}\" src=\"{png_data_uri(png_bytes)}\">"
           if png_bytes else "<p>(no figure)</p>")
    link = f"<p><a href=\"{esc(svg_name)}\">{esc(svg_name)}</a> (vector)</p>" if svg_name else ""
    return f"{img}\n{link}"


def config_html(exp):
    entry, header = exp.entry, exp.header
    rows = [["bench", entry.get("bench", "")],
            ["provider", header.get("provider", "")],
            ["quick", "yes" if header.get("quick") else "no"],
            ["repeat", header.get("repeat", 1)]]
    if header.get("cores"):
        rows.append(["scale", f"sweeps sized for {header['cores']} CPU(s); the paper's scale is in "
                              f"the fidelity note"])
    rows.append(["fidelity", C.fidelity(entry)])
    args = entry.get("args") or {}
    arg_text = " ".join(f"{k} {v}".strip() for k, v in args.items()) or "(none)"
    rows.append(["args", arg_text])
    sweep = entry.get("sweep") or []
    sweep_text = "; ".join(f"{s.get('flag')}: {', '.join(str(v) for v in s.get('values', []))}"
                           for s in sweep if isinstance(s, dict)) or "(one point)"
    rows.append(["sweep", sweep_text])
    rows.append(["rows", _text(entry.get("rows") or {})])
    rows.append(["plot", _text(entry.get("plot") or {})])
    out = ["<h2>Configuration</h2>", table(["setting", "value"], [[k, _text(v)] for k, v in rows])]
    commands = header.get("command_lines") or []
    if commands:
        out.append("<p>Command lines:</p>")
        out.append("<pre>" + "\n".join(esc(c if isinstance(c, str) else " ".join(map(str, c)))
                                       for c in commands) + "</pre>")
    return "\n".join(out)


def environment_html(environment, heading="Environment"):
    rows = [[k, _text(v)] for k, v in environment.items()]
    if not rows:
        return f"<h2>{esc(heading)}</h2>\n<p>(not recorded)</p>"
    return f"<h2>{esc(heading)}</h2>\n" + table(["key", "value"], rows)


def data_html(exp, pdata):
    out = ["<h2>Data</h2>"]
    scale = exp.plot.get("y_scale")
    scale_text = f", multiplied by {scale}" if scale not in (None, 1, 1.0) else ""
    out.append(f"<p>y: <code>{esc(pdata.y_field)}</code>{esc(scale_text)}; "
               f"x: <code>{esc(pdata.x_field)}</code>; median, min and max over repeats.</p>")
    drawn = [e for e in pdata.extras if not e.reference]
    if drawn:
        out.append("<p>Also drawn: " + "; ".join(
            f"<code>{esc(e.field)}</code> as &ldquo;{esc(e.label)}&rdquo;" for e in drawn) + ".</p>")
    for e in pdata.extras:
        if e.reference:
            lines = [line for line in exp.header.get("reference_command_lines") or []
                     if isinstance(line, str)]
            out.append(f"<p>Reference, computed and not measured: &ldquo;{esc(e.label)}&rdquo;, "
                       "drawn in each series' colour with a line style of its own; the claim "
                       "compares it only where its check names <code>reference_model</code>."
                       + (" From: " + "; ".join(f"<code>{esc(line)}</code>" for line in lines)
                          if lines else "") + "</p>")
    if pdata.points or any(e.points for e in pdata.extras):
        header = ["series", "x", "median", "min", "max", "n"]
        if pdata.extras:
            header.insert(1, "quantity")
        rows = []
        for points, fields, name in ([(pdata.points, pdata.series_fields, pdata.y_name)] +
                                     [(e.points, e.series_fields, e.label) for e in pdata.extras]):
            for p in points:
                row = [pdata.series_text(p.series, fields) if p.series else "-", pdata.x_text(p.x),
                       D.format_number(p.median), D.format_number(p.low),
                       D.format_number(p.high), p.n]
                if pdata.extras:
                    row.insert(1, name)
                rows.append(row)
        out.append(table(header, rows, numeric_from=3 if pdata.extras else 2))
    else:
        out.append(f"<p>no data: {esc(pdata.empty_reason)}</p>")
    for note in pdata.missing + pdata.notes:
        out.append(f"<p>{esc(note)}</p>")
    if pdata.refused:
        out.append("<h3>Refused</h3>\n<ul>")
        for r in pdata.refused:
            times = f" (&times;{r.count})" if r.count > 1 else ""
            out.append(f"<li>{esc(r.label)}: refused: {esc(r.reason)}{times}</li>")
        out.append("</ul>")
    return "\n".join(out)


def table_kind_html(exp, pdata):
    """For kind "table": the numbers as the figure shows them, as an HTML table."""
    if exp.plot.get("kind") != "table" or not pdata.points:
        return ""
    header, rows, numeric_from = F.table_rows(exp.plot, pdata)
    return table(header, rows, numeric_from=numeric_from)


def experiment_page(exp, pdata, verdict, png_bytes, svg_name):
    """The full HTML text of DIR/ID.html."""
    title = exp.entry.get("title") or ""
    body = [f"<h1>{esc(exp.id)}: {esc(title)}</h1>"]
    if exp.entry.get("paper"):
        body.append(f"<p>{esc(exp.entry['paper'])}</p>")
    body.append(figure_html(exp, png_bytes, svg_name))
    body.append(table_kind_html(exp, pdata))
    if exp.entry.get("caption"):
        body.append(f"<p class=\"caption\">{esc(exp.entry['caption'])}</p>")
    body.append(claim_html(exp, verdict))
    body.append(config_html(exp))
    body.append(environment_html(exp.environment))
    body.append(data_html(exp, pdata))
    return document(f"{exp.id}: {title}", "\n".join(b for b in body if b))


# --- the report index ----------------------------------------------------------------

_THUMB_WIDTH = 200  # pixels


def thumbnail(png_bytes, width=_THUMB_WIDTH):
    """A small PNG of a figure (area-averaged, deterministic), or None when it cannot be made."""
    if not png_bytes:
        return None
    try:
        import io
        import matplotlib.image as mpimg
        import numpy as np
    except ImportError:
        return None
    image = mpimg.imread(io.BytesIO(png_bytes), format="png")
    factor = max(1, int(np.ceil(image.shape[1] / width)))
    height = image.shape[0] // factor * factor
    wide = image.shape[1] // factor * factor
    small = image[:height, :wide].reshape(height // factor, factor, wide // factor, factor, -1).mean(axis=(1, 3))
    out = io.BytesIO()
    mpimg.imsave(out, np.clip(small, 0, 1), format="png", metadata={"Software": None})
    return out.getvalue()


def short_claim(entry, limit=160):
    """The claim in a line: its text up to the first colon or full stop (at most `limit`
    characters, cut at a word), and where the paper says it."""
    claim = entry.get("claim") or {}
    text = str(claim.get("text") or "").strip()
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([") - (c in ")]")
        if depth == 0 and c in ".:;" and text[i + 1:i + 2] == " " and 30 <= i < limit:
            text = text[:i] + ("." if c == "." else "")
            break
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    paper = claim.get("paper") if isinstance(claim.get("paper"), dict) else {}
    return text, str(paper.get("place") or "")


def _busy_rows(pdata):
    rows = pdata.rows + pdata.refused_rows
    flagged = [r for r in rows if isinstance(r.get("environment"), dict) and r["environment"].get("busy")]
    return len(flagged), len(rows)


def scale_text(exp):
    """The scale the sweeps were sized for: the JSONL header's cores when present, else the CPUs
    the environment counted, and whether the run was quick."""
    cores = exp.header.get("cores")
    if isinstance(cores, int) and not isinstance(cores, bool):
        text = f"{cores} CPUs"
    elif exp.environment.get("cores"):
        text = f"{exp.environment['cores']} CPUs (machine)"
    else:
        text = "not recorded"
    return text + (", quick" if exp.header.get("quick") else "")


def repeats_text(exp, pdata):
    """Repeats asked for, and those measured where fewer (a failed or refused repeat)."""
    asked = exp.header.get("repeat")
    counts = sorted({p.n for p in pdata.points})
    if not counts:
        return str(asked) if asked else "-"
    got = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    if asked in (None, counts[-1]) and len(counts) == 1:
        return got
    return f"{asked} asked, {got} measured" if asked else got


_VOLATILE = ("load_start", "load_end", "others_cpu", "busy")  # differ from run to run by nature


def gathered_environment(items):
    """[(key, text, differs)] over every entry's environment: a key every entry agrees on is one
    value; one that differs lists each value with the entries that had it. Load averages are
    given as their range; busy is counted separately."""
    order, values = [], {}
    for exp, *_ in items:
        for key, value in exp.environment.items():
            if key not in values:
                order.append(key)
                values[key] = {}
            values[key].setdefault(_text(value), []).append(exp.id)
    out = []
    total = len(items)
    for key in order:
        if key == "busy":
            continue
        seen = values[key]
        have = sum(len(ids) for ids in seen.values())
        if key in _VOLATILE:
            numbers = sorted(float(v) for v in seen if _is_number(v))
            text = ("not recorded" if not numbers else f"{numbers[0]:g}" if numbers[0] == numbers[-1]
                    else f"{numbers[0]:g} to {numbers[-1]:g} over the entries")
            out.append((key, text, False))
            continue
        if len(seen) == 1 and have == total:
            out.append((key, next(iter(seen)), False))
            continue
        parts = []
        for value, ids in seen.items():
            listed = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
            parts.append(f"{value} ({len(ids)}: {listed})")
        if have < total:
            parts.append(f"not recorded ({total - have} entries)")
        out.append((key, "; ".join(parts), True))
    return out


def _is_number(text):
    try:
        float(text)
        return text not in ("true", "false", "null")
    except ValueError:
        return False


def busy_summary(items):
    """The busy warnings counted: entries whose run-level environment says busy, and bench rows."""
    entries = [exp.id for exp, *_ in items if exp.environment.get("busy")]
    rows_busy = rows_all = 0
    for _, pdata, *_ in items:
        b, n = _busy_rows(pdata)
        rows_busy += b
        rows_all += n
    return entries, rows_busy, rows_all


def _index_table(items, thumbs):
    header = ["entry", "paper's claim", "fidelity", "verdict", "scale", "repeats", "busy rows", "figure"]
    out = ["<table class=\"index\">", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
    for (exp, pdata, verdict, _, _), thumb in zip(items, thumbs):
        cls = _VERDICT_CLASS.get(verdict.verdict, "unmeasurable")
        text, place = short_claim(exp.entry)
        busy, rows = _busy_rows(pdata)
        image = (f"<a href=\"#{esc(exp.id)}\"><img class=\"thumb\" alt=\"{esc(exp.id)}\" "
                 f"src=\"{png_data_uri(thumb)}\"></a>" if thumb else "")
        out.append(
            "<tr>"
            f"<td><a href=\"#{esc(exp.id)}\">{esc(exp.id)}</a><br><span class=\"small\">"
            f"{esc(exp.entry.get('title', ''))}</span></td>"
            f"<td>{esc(text)}" + (f" <span class=\"place\">({esc(place)})</span>" if place else "") + "</td>"
            f"<td>{esc(C.fidelity(exp.entry))}</td>"
            f"<td><span class=\"verdict {cls}\">{esc(verdict.verdict)}</span></td>"
            f"<td>{esc(scale_text(exp))}</td>"
            f"<td class=\"num\">{esc(repeats_text(exp, pdata))}</td>"
            f"<td class=\"num{' busy' if busy else ''}\">{busy} of {rows}</td>"
            f"<td>{image}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def report_page(items, skipped=()):
    """The index: items are (exp, pdata, verdict, png_bytes, page_name) in id order; skipped
    are the files that could not be read, as (path, reason)."""
    body = ["<h1>fabflow experiments</h1>"]
    if skipped:
        body.append("<p class=\"busy\">Not included (unreadable files): "
                    + "; ".join(f"{esc(os.path.basename(p))}: {esc(why)}" for p, why in skipped)
                    + ".</p>")
    if items:
        providers = sorted({str(exp.header.get("provider", "")) for exp, *_ in items})
        machines = sorted({F.machine_name(exp.environment) for exp, *_ in items})
        quick = sum(1 for exp, *_ in items if exp.header.get("quick"))
        counts = {}
        for _, _, verdict, _, _ in items:
            counts[verdict.verdict] = counts.get(verdict.verdict, 0) + 1
        body.append(f"<p>{len(items)} experiment(s); provider {esc(', '.join(providers))} on "
                    f"{esc(', '.join(machines))}"
                    f"{f'; {quick} quick run(s)' if quick else ''}. Verdicts: "
                    + esc(", ".join(f"{n} {v}" for v, n in sorted(counts.items()))) + ".</p>")
        entries, rows_busy, rows_all = busy_summary(items)
        if entries or rows_busy:
            listed = ", ".join(entries[:8]) + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")
            body.append(f"<p class=\"busy\">Busy machine: {len(entries)} of {len(items)} entries "
                        f"started while other processes took CPU time from the run"
                        f"{': ' + esc(listed) if entries else ''}; {rows_busy} of {rows_all} bench "
                        f"rows carry the busy warning. Their numbers may be far off.</p>")
    thumbs = [thumbnail(png) for _, _, _, png, _ in items]
    body.append("<h2>Summary</h2>\n" + _index_table(items, thumbs))
    if items:
        env = gathered_environment(items)
        rows = ["<table>", "<tr><th>key</th><th>value</th></tr>"]
        for key, text, differs in env:
            cls = " class=\"differs\"" if differs else ""
            mark = " (differs)" if differs else ""
            rows.append(f"<tr{cls}><td>{esc(key)}{mark}</td><td>{esc(text)}</td></tr>")
        rows.append("</table>")
        differing = sum(1 for _, _, d in env if d)
        body.append(f"<h2>Environment (gathered from all {len(items)} entries)</h2>\n"
                    + (f"<p>{differing} key(s) differ between entries (marked).</p>\n" if differing else "")
                    + "\n".join(rows))
    for exp, pdata, verdict, png_bytes, page_name in items:
        title = exp.entry.get("title") or ""
        section = [f"<section class=\"experiment\" id=\"{esc(exp.id)}\">",
                   f"<h2>{esc(exp.id)}: {esc(title)}</h2>",
                   figure_html(exp, png_bytes, None),
                   table_kind_html(exp, pdata)]
        if exp.entry.get("caption"):
            section.append(f"<p class=\"caption\">{esc(exp.entry['caption'])}</p>")
        section.append(claim_html(exp, verdict, level=3))
        section.append(f"<p><a href=\"{esc(page_name)}\">full page: configuration, "
                       f"environment and data</a></p>")
        section.append("</section>")
        body.append("\n".join(s for s in section if s))
    return document("fabflow experiments", "\n".join(body))
