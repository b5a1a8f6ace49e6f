"""Reading an experiment's JSONL file and turning its rows into plot points.

The runner writes one header line (type "experiment") followed by the JSON lines
the bench printed, then the rows of the entry's reference (a model's series, marked
"reference_model").  This module loads that file, selects the data rows named by
the catalogue entry's "rows" filter, sets aside refused rows (non-empty
"unsupported") and reference rows, and aggregates the repeats of every (series, x)
group to their median, minimum and maximum.  Nothing here needs matplotlib.
"""

import dataclasses
import fnmatch
import json
import math
import os
import re
import statistics


class FabflowError(Exception):
    """An error reported to the user as one 'fabflow: error: ...' line."""


_MISSING = object()


@dataclasses.dataclass
class Experiment:
    """One loaded JSONL file: its header line and every later row."""

    path: str
    header: dict
    rows: list

    @property
    def entry(self):
        return self.header.get("entry") or {}

    @property
    def id(self):
        return str(self.header.get("id") or self.entry.get("id") or
                   os.path.splitext(os.path.basename(self.path))[0])

    @property
    def plot(self):
        return self.entry.get("plot") or {}

    @property
    def environment(self):
        env = self.header.get("environment")
        return env if isinstance(env, dict) else {}


@dataclasses.dataclass
class Point:
    """The aggregate of one (series, x) group."""

    series: tuple
    x: object
    median: float
    low: float
    high: float
    n: int


@dataclasses.dataclass
class Refusal:
    """A refused configuration, counted once however many repeats refused it."""

    label: str
    reason: str
    count: int = 1


@dataclasses.dataclass
class PlotData:
    """Everything the figure and the page need about one experiment's data."""

    x_field: str
    y_field: str
    series_fields: list
    x_numeric: bool
    x_order: list
    series_order: list
    points: list
    refused: list
    notes: list
    empty_reason: str = ""
    rows: list = dataclasses.field(default_factory=list)  # the data rows kept
    refused_rows: list = dataclasses.field(default_factory=list)
    extras: list = dataclasses.field(default_factory=list)  # ExtraSeries of plot.y_extra, reference
    reference_rows: list = dataclasses.field(default_factory=list)  # the model's rows, not measured
    labels: dict = dataclasses.field(default_factory=dict)  # plot.labels: {field: {value: word}}
    names: dict = dataclasses.field(default_factory=dict)  # plot.names: {field: human name}
    y_name: str = ""  # the main y's short name beside y_extra (plot.y_name)
    missing: list = dataclasses.field(default_factory=list)  # notes for the figure

    def series_text(self, key, fields=None):
        """A series tuple as a legend or table shows it (the entry's labels applied)."""
        return series_label(key, self.series_fields if fields is None else fields, self.labels)

    def field_text(self, fields=None):
        """The series fields' human names (legend title, table header)."""
        return field_title(self.series_fields if fields is None else fields, self.names)

    def x_text(self, x):
        """An x value as an axis or table shows it (the x field's labels applied)."""
        return format_x(x, self.x_field, self.labels)


@dataclasses.dataclass
class ExtraSeries:
    """A second y field drawn beside the main one (plot.y_extra): its own aggregated points.

    per_series: the extra field is grouped by the plot's series (drawn in each series' colour
    with its own line style); otherwise it has its own series fields, often none (one curve)."""

    field: str
    label: str
    series_fields: list
    per_series: bool
    points: list
    series_order: list
    reference: bool = False  # computed by a model (the entry's reference), not measured


# --- loading -----------------------------------------------------------------

def load_experiment(path):
    """Parse DIR/ID.jsonl; raise FabflowError naming the file (and line)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise FabflowError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise FabflowError(f"{path}: not UTF-8 text") from None
    objects = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise FabflowError(f"{path}:{number}: malformed JSON line ({e.msg}, column {e.colno})") from None
        if not isinstance(obj, dict):
            raise FabflowError(f"{path}:{number}: a line is not a JSON object")
        objects.append((number, obj))
    if not objects:
        raise FabflowError(f"{path}: empty file (expected an 'experiment' header line)")
    number, header = objects[0]
    if header.get("type") != "experiment":
        raise FabflowError(f"{path}:{number}: first line is not of type 'experiment'")
    if not isinstance(header.get("entry"), dict):
        raise FabflowError(f"{path}:{number}: header has no 'entry' object")
    plot = header["entry"].get("plot")
    if not isinstance(plot, dict) or not plot.get("x") or not plot.get("y"):
        raise FabflowError(f"{path}:{number}: entry has no plot with 'x' and 'y'")
    return Experiment(path=path, header=header, rows=[obj for _, obj in objects[1:]])


# --- fields and matching -------------------------------------------------------

def get_field(row, name, default=None):
    """Value of a field; dots descend into nested objects ("latency_ns.p50").

    A literal key wins ("point.-S" is also stored flattened by the runner);
    otherwise every split of the name at a dot is tried, longest prefix first.
    """
    value = _lookup(row, name)
    return default if value is _MISSING else value


def _lookup(obj, name):
    if not isinstance(obj, dict):
        return _MISSING
    if name in obj:
        return obj[name]
    dots = [i for i, c in enumerate(name) if c == "."]
    for i in reversed(dots):
        head, rest = name[:i], name[i + 1:]
        if head in obj:
            value = _lookup(obj[head], rest)
            if value is not _MISSING:
                return value
    return _MISSING


def value_matches(actual, wanted):
    """Whether a row's value satisfies one filter value.

    A list means any of its elements; a string is an fnmatch glob compared with
    the value's text; a number compares numerically (also with numeric text);
    booleans and null compare only with themselves.
    """
    if isinstance(wanted, list):
        return any(value_matches(actual, w) for w in wanted)
    if actual is _MISSING:
        return False
    if isinstance(wanted, bool) or wanted is None:
        return type(actual) is type(wanted) and actual == wanted
    if isinstance(wanted, str):
        if actual is None:
            return False
        text = actual if isinstance(actual, str) else _plain_text(actual)
        return fnmatch.fnmatchcase(text, wanted)
    if isinstance(actual, bool):
        return False
    if isinstance(wanted, (int, float)):
        number = to_number(actual)
        return number is not None and number == float(wanted)
    return actual == wanted


def _plain_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def row_matches(row, conditions, missing_ok=False):
    """Whether every {field: value} condition holds for the row.

    missing_ok: a field the row lacks does not disqualify it (used for refused
    rows, which carry fewer fields than measured ones).
    """
    for name, wanted in (conditions or {}).items():
        actual = _lookup(row, name)
        if actual is _MISSING and missing_ok:
            continue
        if not value_matches(actual, wanted):
            return False
    return True


def is_refused(row):
    reason = row.get("unsupported")
    return reason not in (None, "", False)


def is_reference(row):
    """Whether a row is a model's (the entry's reference series), not a measurement."""
    return row.get("reference_model") not in (None, "")


def names_reference(where):
    """Whether a row selection asks for reference rows: it names the field reference_model."""
    return isinstance(where, dict) and "reference_model" in where


def select_rows(exp, references=None):
    """Split the rows into (data rows, refused rows) using the entry's filter. Reference rows
    are not data rows: they go to `references` (a list) when given, whatever the filter."""
    conditions = exp.entry.get("rows") or {}
    kept, refused = [], []
    for row in exp.rows:
        if row.get("type") == "experiment":
            continue
        if is_reference(row):
            if references is not None:
                references.append(row)
            continue
        if is_refused(row):
            if row_matches(row, conditions, missing_ok=True):
                refused.append(row)
        elif row_matches(row, conditions):
            kept.append(row)
    return kept, refused


# --- numbers -------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def is_size_field(name):
    """x fields holding byte sizes get 64, 1K, 64K, 1M tick labels."""
    return name.endswith("bytes") or name in ("size", "point.-S")


def to_number(value, size=False):
    """A float for numbers and numeric text ("4K" too when size is set), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
            return number if math.isfinite(number) else None
        except ValueError:
            pass
        if size:
            m = _SIZE.match(value)
            if m:
                return float(m.group(1)) * _UNITS[m.group(2).lower()]
    return None


def format_size(value):
    """64 -> '64', 1024 -> '1K', 65536 -> '64K', 1048576 -> '1M'."""
    for suffix, unit in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(value) >= unit:
            return f"{value / unit:g}{suffix}"
    return f"{value:g}"


def format_number(value):
    """Deterministic text for a measured number: 812.0, 0.1234, 1.5e-07."""
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    return f"{value:.6g}"


def format_tick(value):
    """A linear axis' tick: 12000000 -> '12M', 2500 -> '2.5k', 0.25 -> '0.25'.

    matplotlib would write large ticks with an offset ("1e7" above the axis),
    which a reader of a rate easily misses."""
    for suffix, unit in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= unit:
            return f"{value / unit:g}{suffix}"
    return f"{value:g}"


def format_x(value, x_field, labels=None):
    """Text for an x value: sizes as 64K, integral numbers without '.0'; labels: the entry's
    words for values ({field: {value: word}}, plot.labels)."""
    word = _label_for(labels, x_field, value)
    if word is not None:
        return word
    if isinstance(value, float):
        if is_size_field(x_field):
            return format_size(value)
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _label_for(labels, field, value):
    """The entry's word for a field's value (plot.labels), or None. Keys are the value's text
    as the rows hold it: "true", "false", "null", "4096", "push1-watermark-pull"."""
    if not labels or not isinstance(labels.get(field), dict):
        return None
    words = labels[field]
    text = "null" if value is None else _plain_text(value)
    if text in words:
        return str(words[text])
    if isinstance(value, float) and not value.is_integer() and f"{value:g}" in words:
        return str(words[f"{value:g}"])
    return None


def series_key(row, fields):
    """The tuple of a row's series values (unhashable values as JSON text)."""
    key = []
    for name in fields:
        value = get_field(row, name)
        if isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        key.append(value)
    return tuple(key)


def series_label(key, fields=(), labels=None):
    """Text for a series tuple.

    Without `fields` (claim details: name=value) every value is shown as the
    rows hold it, null and true included.  With the series' field names (legends,
    tables) it is written for a reader: the entry's word for the value when
    `labels` ({field: {value text: word}}, plot.labels) has one (an empty word
    leaves the value out), else a value a row lacks is left out, a flag is its
    field's name or "no <name>", a size in a size field is 64KB.
    """
    if not key:
        return "all"
    if not fields:
        return ", ".join("null" if v is None else _plain_text(v) for v in key)
    parts = []
    for value, field in zip(key, fields):
        word = _label_for(labels, field, value)
        if word is not None:
            if word:
                parts.append(word)
            continue
        if value is None:
            continue
        if isinstance(value, bool):
            name = field.rsplit(".", 1)[-1].replace("_", " ")
            parts.append(name if value else "no " + name)
        elif is_size_field(field) and to_number(value, size=True) is not None:
            parts.append(format_size(to_number(value, size=True)) + "B")
        else:
            parts.append(_plain_text(value))
    return ", ".join(parts) or "all"


def field_name(field, names=None):
    """A field's human name: the entry's (plot.names), "size" for a size field, else its last
    part with spaces ("recv_post" -> "recv post")."""
    if names and names.get(field):
        return str(names[field])
    if is_size_field(field):
        return "size"
    return field.rsplit(".", 1)[-1].replace("_", " ")


def field_title(fields, names=None):
    """Legend title for the series fields: their names with spaces, sizes named as such."""
    return ", ".join(field_name(f, names) for f in fields)


# --- aggregation ---------------------------------------------------------------

def x_axis(rows, x_field):
    """Decide whether x is numeric; return (numeric, {id(row): x value}).

    x is numeric when every present value converts to a number (size text such
    as "4K" included for size fields); otherwise every value is used as text.
    """
    raw = [(row, get_field(row, x_field)) for row in rows]
    raw = [(row, v) for row, v in raw if v is not None]
    size = is_size_field(x_field)
    numbers = [to_number(v, size) for _, v in raw]
    numeric = all(n is not None for n in numbers)
    if numeric:
        return True, {id(row): n for (row, _), n in zip(raw, numbers)}
    return False, {id(row): _plain_text(v) for row, v in raw}


def aggregate(rows, x_field, y_field, series_fields, scale=1.0, x_values=None, divide_by=None):
    """Group rows by (series, x) and reduce y to median/min/max.

    divide_by: a field each row's y is divided by first (e.g. instructions per message over
    the response bytes gives instructions per byte); rows where it is missing or zero count
    as rows without a numeric y.
    Returns (points, x_numeric, x_order, series_order, skipped) where skipped
    counts rows without an x or a numeric y.  Series keep first-seen order; x
    is sorted when numeric and kept in first-seen order when categorical.
    x_values: the result of x_axis() over a larger set of rows that contains
    these, so that subsets interpret x the same way.
    """
    numeric, xs = x_values if x_values is not None else x_axis(rows, x_field)
    groups = {}
    series_order, x_seen = [], []
    skipped = 0
    for row in rows:
        y = to_number(get_field(row, y_field))
        if y is not None and divide_by:
            d = to_number(get_field(row, divide_by))
            y = y / d if d else None
        if id(row) not in xs or y is None:
            skipped += 1
            continue
        x = xs[id(row)]
        key = series_key(row, series_fields)
        if key not in groups:
            groups[key] = {}
            series_order.append(key)
        if x not in x_seen:
            x_seen.append(x)
        groups[key].setdefault(x, []).append(y * scale)
    x_order = sorted(x_seen) if numeric else x_seen
    rank = {x: i for i, x in enumerate(x_order)}
    points = []
    for key in series_order:
        for x in sorted(groups[key], key=rank.__getitem__):
            ys = groups[key][x]
            points.append(Point(series=key, x=x, median=statistics.median(ys),
                                low=min(ys), high=max(ys), n=len(ys)))
    return points, numeric, x_order, series_order, skipped


def refusals(refused_rows, x_field, series_fields):
    """Refused rows as labelled reasons, deduplicated over repeats."""
    out = {}
    for row in refused_rows:
        parts = []
        for name in series_fields:
            value = get_field(row, name)
            if value is not None:
                parts.append(f"{name}={_plain_text(value)}")
        x = get_field(row, x_field)
        if x is not None:
            parts.append(f"{x_field}={_plain_text(x)}")
        label = ", ".join(parts) or "(no series fields)"
        reason = str(row.get("unsupported"))
        if (label, reason) in out:
            out[(label, reason)].count += 1
        else:
            out[(label, reason)] = Refusal(label=label, reason=reason)
    return list(out.values())


def _series_fields(value, where):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise FabflowError(f"{where} must be a field name or a list of field names")


PLOT_KEYS = {"kind", "x", "y", "series", "xlabel", "ylabel", "logx", "logy", "y_scale", "y_divide_by",
             "y_extra", "y_name", "labels", "names", "style", "panels", "layout"}


def plot_options(plot):
    """The plot options beyond x and y, checked: (series, labels, names, y_extra items).

    labels: {field: {value text: word}}; names: {field: name}; y_extra: a list of
    {"field", "label", optional "series", "where", "y_scale"}. A malformed option is a
    FabflowError naming it (a misspelt catalogue entry must not draw a wrong figure)."""
    unknown = sorted(set(plot) - PLOT_KEYS)
    if unknown:
        raise FabflowError(f"plot: unknown option '{unknown[0]}' (options: {', '.join(sorted(PLOT_KEYS))})")
    series = _series_fields(plot.get("series"), "plot.series")
    labels = plot.get("labels") or {}
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and
            all(isinstance(w, str) for w in v.values()) for k, v in labels.items()):
        raise FabflowError("plot.labels must be {field: {value: word}} with text words")
    names = plot.get("names") or {}
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise FabflowError("plot.names must be {field: name} with text names")
    extras = plot.get("y_extra") or []
    if not isinstance(extras, list):
        raise FabflowError("plot.y_extra must be a list of {field, label}")
    known = {"field", "label", "series", "where", "y_scale"}
    for i, item in enumerate(extras):
        where = f"plot.y_extra[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("field"), str) or not item["field"]:
            raise FabflowError(f"{where} needs a \"field\" (the row field to draw)")
        unknown = sorted(set(item) - known)
        if unknown:
            raise FabflowError(f"{where}: unknown key '{unknown[0]}' (keys: {', '.join(sorted(known))})")
        if "label" in item and not isinstance(item["label"], str):
            raise FabflowError(f"{where}.label must be text")
        if "where" in item and not isinstance(item["where"], dict):
            raise FabflowError(f"{where}.where must be an object {{field: value}}")
        if "series" in item:
            _series_fields(item["series"], f"{where}.series")
        if "y_scale" in item and to_number(item["y_scale"]) is None:
            raise FabflowError(f"{where}.y_scale must be a number")
    for key in ("style", "panels"):
        value = plot.get(key)
        if value is not None and value not in series:
            raise FabflowError(f"plot.{key} must name one of the series fields ({', '.join(series) or 'none'})")
    if plot.get("style") is not None and plot.get("style") == plot.get("panels"):
        raise FabflowError("plot.style and plot.panels name the same field")
    if plot.get("layout") not in (None, "long", "wide"):
        raise FabflowError("plot.layout must be \"long\" or \"wide\"")
    return series, labels, names, extras


def _short_name(field):
    return field.rsplit(".", 1)[-1].replace("_", " ")


def prepare(exp):
    """Select, aggregate and annotate an experiment's data for plotting."""
    plot = exp.plot
    x_field, y_field = str(plot["x"]), str(plot["y"])
    series_fields, labels, names, extra_items = plot_options(plot)
    scale = to_number(plot.get("y_scale"))
    scale = 1.0 if scale is None else scale
    references = []
    kept, refused_rows = select_rows(exp, references)
    x_values = x_axis(kept + references, x_field)
    points, numeric, x_order, series_order, skipped = aggregate(
        kept, x_field, y_field, series_fields, scale, x_values=x_values,
        divide_by=plot.get("y_divide_by"))
    notes = []
    if skipped:
        notes.append(f"{skipped} row(s) without a value for '{x_field}' or a numeric '{y_field}' were left out")
    extras = []
    for item in extra_items:
        per_series = "series" not in item
        fields = series_fields if per_series else _series_fields(item["series"], "")
        rows = [r for r in kept if row_matches(r, item.get("where"))]
        item_scale = to_number(item.get("y_scale"))
        e_points, _, e_x, e_series, _ = aggregate(
            rows, x_field, item["field"], fields, scale if item_scale is None else item_scale,
            x_values=x_values)
        extras.append(ExtraSeries(field=item["field"], label=item.get("label") or _short_name(item["field"]),
                                  series_fields=list(fields), per_series=per_series,
                                  points=e_points, series_order=e_series))
        for x in e_x:  # an x only an extra field has still gets a place on the axis
            if x not in x_order:
                x_order.append(x)
    # The reference: one label per entry, drawn in each series' colour with a line style of its
    # own, and never mixed into the measured points.
    for label in dict.fromkeys(str(r.get("reference_label") or r.get("reference_model"))
                               for r in references):
        rows = [r for r in references
                if str(r.get("reference_label") or r.get("reference_model")) == label]
        r_points, _, r_x, r_series, _ = aggregate(rows, x_field, y_field, series_fields, scale,
                                                  x_values=x_values)
        extras.append(ExtraSeries(field=y_field, label=label, series_fields=list(series_fields),
                                  per_series=True, points=r_points, series_order=r_series,
                                  reference=True))
        for x in r_x:
            if x not in x_order:
                x_order.append(x)
    if numeric:
        x_order.sort()
    data = PlotData(x_field=x_field, y_field=y_field, series_fields=list(series_fields),
                    x_numeric=numeric, x_order=x_order, series_order=series_order,
                    points=points, refused=refusals(refused_rows, x_field, series_fields),
                    notes=notes, rows=kept, refused_rows=refused_rows, extras=extras,
                    reference_rows=references,
                    labels=labels, names=names,
                    y_name=str(plot.get("y_name") or _short_name(y_field)))
    data.missing = missing_notes(exp, data)
    if not points and not any(e.points for e in extras if not e.reference):
        data.empty_reason = empty_reason(exp, kept, refused_rows, y_field)
    return data


# --- what is missing, said on the figure ---------------------------------------------

_GROUP_ROLES = ("where", "better", "worse", "rising", "reference", "earlier", "later")


def claim_groups(check):
    """Every row selection ({field: value}) a claim check compares, `all` included, in order."""
    out = []
    if not isinstance(check, dict):
        return out
    if check.get("kind") == "all":
        for part in check.get("checks") or []:
            out += claim_groups(part)
        return out
    for role in _GROUP_ROLES:
        group = check.get(role)
        if isinstance(group, dict) and group and group not in out:
            out.append(group)
    return out


def condition_text(condition, labels=None, names=None):
    """{"mode": "write-like", "batching": false} as a reader's words: 'mode write-like, no batching'."""
    parts = []
    for field, wanted in condition.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        words = []
        for value in values:
            word = _label_for(labels, field, value)
            if word:
                words.append(word)
            elif isinstance(value, bool) or is_size_field(field):
                words.append(series_label((value,), (field,), labels))
            else:
                words.append(f"{field_name(field, names)} {_plain_text(value)}")
        parts.append(" or ".join(words))
    return ", ".join(parts)


def missing_notes(exp, pdata):
    """Lines that say on the figure what it lacks: series refused on this provider (grouped by
    series and reason, with the x values when not all of them), and row groups the claim
    compares that no row (kept or refused) belongs to."""
    provider = exp.header.get("provider") or "this provider"
    groups = {}
    size = is_size_field(pdata.x_field)
    for row in pdata.refused_rows:
        key = series_key(row, pdata.series_fields)
        label = pdata.series_text(key) if any(v is not None for v in key) else "every point"
        reason = str(row.get("unsupported"))
        xs = groups.setdefault((label, reason), [])
        x = get_field(row, pdata.x_field)
        number = to_number(x, size)
        value = number if pdata.x_numeric and number is not None else (None if x is None else _plain_text(x))
        if value is not None and value not in xs:
            xs.append(value)
    notes = []
    for (label, reason), xs in groups.items():
        where = ""
        if xs and not set(pdata.x_order) <= set(xs):
            ordered = sorted(xs) if all(isinstance(v, float) for v in xs) else xs
            where = " at " + ", ".join(pdata.x_text(v) for v in ordered)
        notes.append(f"not measured on {provider}: {label}{where} (refused: {reason})")
    check = (exp.entry.get("claim") or {}).get("check")
    for group in claim_groups(check):
        rows = pdata.reference_rows if names_reference(group) else pdata.rows
        if any(row_matches(r, group) for r in rows):
            continue
        if any(row_matches(r, group, missing_ok=True) for r in pdata.refused_rows):
            continue  # said above
        notes.append(f"no rows for {condition_text(group, pdata.labels, pdata.names)} in this run "
                     f"(the claim compares them)")
    return notes


def empty_reason(exp, kept, refused_rows, y_field):
    """Why nothing is left to plot, in a few words."""
    entry = exp.entry
    fidelity = entry.get("fidelity") or {}
    if isinstance(fidelity, dict) and fidelity.get("kind") == "not_measurable":
        return f"not measurable here: {fidelity.get('note', '')}"
    if kept:
        return f"no row has a numeric '{y_field}'"
    if refused_rows:
        return f"every matching row was refused ({len(refused_rows)} refused)"
    if exp.rows:
        return f"no row matches {json.dumps(entry.get('rows') or {}, sort_keys=True)}"
    return "the file has no data rows"
