"""Reading an experiment's JSONL file and turning its rows into plot points.

The runner writes one header line (type "experiment") followed by the JSON lines
the bench printed.  This module loads that file, selects the data rows named by
the catalogue entry's "rows" filter, sets aside refused rows (non-empty
"unsupported"), and aggregates the repeats of every (series, x) group to their
median, minimum and maximum.  Nothing here needs matplotlib.
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


def select_rows(exp):
    """Split the rows into (data rows, refused rows) using the entry's filter."""
    conditions = exp.entry.get("rows") or {}
    kept, refused = [], []
    for row in exp.rows:
        if row.get("type") == "experiment":
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


def format_x(value, x_field):
    """Text for an x value: sizes as 64K, integral numbers without '.0'."""
    if isinstance(value, float):
        if is_size_field(x_field):
            return format_size(value)
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def series_key(row, fields):
    """The tuple of a row's series values (unhashable values as JSON text)."""
    key = []
    for name in fields:
        value = get_field(row, name)
        if isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        key.append(value)
    return tuple(key)


def series_label(key, fields=()):
    """Text for a series tuple.

    Without `fields` (claim details: name=value) every value is shown as the
    rows hold it, null and true included.  With the series' field names (legends,
    tables) it is written for a reader: a value a row lacks is left out, a flag
    is its field's name or "no <name>", a size in a size field is 64KB.
    """
    if not key:
        return "all"
    if not fields:
        return ", ".join("null" if v is None else _plain_text(v) for v in key)
    parts = []
    for value, field in zip(key, fields):
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


def field_title(fields):
    """Legend title for the series fields: their names with spaces, sizes named as such."""
    return ", ".join("size" if is_size_field(f) else f.rsplit(".", 1)[-1].replace("_", " ")
                     for f in fields)


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


def prepare(exp):
    """Select, aggregate and annotate an experiment's data for plotting."""
    plot = exp.plot
    x_field, y_field = str(plot["x"]), str(plot["y"])
    series_fields = plot.get("series") or []
    if isinstance(series_fields, str):
        series_fields = [series_fields]
    scale = to_number(plot.get("y_scale"))
    scale = 1.0 if scale is None else scale
    kept, refused_rows = select_rows(exp)
    points, numeric, x_order, series_order, skipped = aggregate(
        kept, x_field, y_field, series_fields, scale, divide_by=plot.get("y_divide_by"))
    notes = []
    if skipped:
        notes.append(f"{skipped} row(s) without a value for '{x_field}' or a numeric '{y_field}' were left out")
    data = PlotData(x_field=x_field, y_field=y_field, series_fields=list(series_fields),
                    x_numeric=numeric, x_order=x_order, series_order=series_order,
                    points=points, refused=refusals(refused_rows, x_field, series_fields),
                    notes=notes, rows=kept)
    if not points:
        data.empty_reason = empty_reason(exp, kept, refused_rows, y_field)
    return data


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
