"""Checking a catalogue entry's claim against the measured data.

The data rows (already filtered by the entry's "rows" and without refused rows)
are narrowed by each check's "where" clause, grouped by (series, x) and reduced
to the median over repeats; the check then compares those medians.  Every
verdict carries a detail string naming the numbers compared, so a reader can
see why it came out as it did.  Check kinds: at_most, at_least, greater, less,
trend, crossover, earlier, and all (several checks that must all hold); see the
contract in docs.
"""

import dataclasses
import json

from . import data as D

HOLDS = "holds here"
FAILS = "does not hold here"
UNMEASURABLE = "not measurable here"

_LISTED = 6  # offending points named in a detail before "and N more"


@dataclasses.dataclass
class Verdict:
    verdict: str
    detail: str


def _unmeasurable(detail):
    return Verdict(UNMEASURABLE, detail)


def _where_text(where):
    return json.dumps(where or {}, sort_keys=True)


class _Context:
    """The rows and axis choices every check works on."""

    def __init__(self, rows, x_field, series_fields):
        self.rows = rows
        self.x_field = x_field
        self.series_fields = list(series_fields)
        # x is interpreted once over all rows so that groups compare like for like.
        self.x_values = D.x_axis(rows, x_field)
        self.divide_by = None  # the check's y_divide_by, set by evaluate()

    def points(self, y_field, where):
        """Aggregated points of the rows matching where; also the x order."""
        chosen = [r for r in self.rows if D.row_matches(r, where)]
        points, _, x_order, _, _ = D.aggregate(chosen, self.x_field, y_field,
                                                self.series_fields, x_values=self.x_values,
                                                divide_by=self.divide_by)
        return points, x_order

    def x_text(self, x):
        return D.format_x(x, self.x_field)

    def describe(self, point):
        parts = [f"{name}={D.series_label((value,))}"
                 for name, value in zip(self.series_fields, point.series)]
        parts.append(f"x={self.x_text(point.x)}")
        return ", ".join(parts)


def evaluate(entry, rows, x_field, series_fields, empty_reason=""):
    """The verdict for an entry's claim on the given data rows."""
    claim = entry.get("claim")
    if not isinstance(claim, dict):
        return _unmeasurable("the entry states no claim")
    check = claim.get("check")
    if not isinstance(check, dict):
        return _unmeasurable("the claim has no check")
    if not rows:
        if check.get("kind") in _CHECKS or check.get("kind") == "all":
            return _unmeasurable(f"no data: {empty_reason or 'no rows left after filtering'}")
    return _evaluate_check(check, rows, x_field, series_fields)


def _evaluate_check(check, rows, x_field, series_fields):
    kind = check.get("kind")
    if kind == "all":
        return _all(check, rows, x_field, series_fields)
    handler = _CHECKS.get(kind)
    if handler is None:
        return _unmeasurable(f"unknown check kind '{kind}'")
    y_field = check.get("y")
    if not isinstance(y_field, str) or not y_field:
        return _unmeasurable(f"the {kind} check names no 'y' field")
    ctx = _Context(rows, x_field, series_fields)
    ctx.divide_by = check.get("y_divide_by")
    return handler(check, y_field, ctx)


# --- bounds --------------------------------------------------------------------

def _bound(check, y_field, ctx, at_most):
    op, bad_word = ("<=", "above") if at_most else (">=", "below")
    limit = D.to_number(check.get("value"))
    if limit is None:
        return _unmeasurable(f"the {check['kind']} check needs a numeric 'value'")
    where = check.get("where") or {}
    points, _ = ctx.points(y_field, where)
    if not points:
        return _unmeasurable(f"no point with a numeric '{y_field}' matches where {_where_text(where)}")
    bad = [p for p in points if not (p.median <= limit if at_most else p.median >= limit)]
    limit_text = D.format_number(limit)
    if not bad:
        extreme = (max if at_most else min)(points, key=lambda p: p.median)
        word = "largest" if at_most else "smallest"
        return Verdict(HOLDS, f"all {len(points)} point(s) of {y_field} are {op} {limit_text}; "
                              f"{word} {D.format_number(extreme.median)} at {ctx.describe(extreme)}")
    listed = "; ".join(f"{D.format_number(p.median)} at {ctx.describe(p)}" for p in bad[:_LISTED])
    more = f"; and {len(bad) - _LISTED} more" if len(bad) > _LISTED else ""
    return Verdict(FAILS, f"{len(bad)} of {len(points)} point(s) of {y_field} are {bad_word} "
                          f"{limit_text}: {listed}{more}")


def _at_most(check, y_field, ctx):
    return _bound(check, y_field, ctx, at_most=True)


def _at_least(check, y_field, ctx):
    return _bound(check, y_field, ctx, at_most=False)


# --- comparisons between two groups ----------------------------------------------

_AT = ("every_x", "some_x", "largest_x", "smallest_x")


def _compare(check, y_field, ctx, greater):
    factor = D.to_number(check.get("factor", 1.0))
    if factor is None:
        return _unmeasurable(f"the {check['kind']} check has a non-numeric 'factor'")
    at = check.get("at", "every_x")
    if at not in _AT:
        return _unmeasurable(f"unknown 'at' value '{at}' (expected one of {', '.join(_AT)})")
    sides = {}
    for side in ("better", "worse"):
        where = check.get(side) or {}
        points, _ = ctx.points(y_field, where)
        if not points:
            return _unmeasurable(f"no point with a numeric '{y_field}' matches {side} {_where_text(where)}")
        sides[side] = points
    _, all_x = ctx.points(y_field, {})
    xs_better = {p.x for p in sides["better"]}
    xs_worse = {p.x for p in sides["worse"]}
    common = [x for x in all_x if x in xs_better and x in xs_worse]
    common, window_text = _x_window(check, ctx, common)
    if common is None:
        return _unmeasurable(window_text)
    if not common and window_text:
        return _unmeasurable(f"no x {window_text} where both sides were measured")
    if not common:
        # The where clauses pick different x values (e.g. x is the pattern the
        # claim compares): one comparison over all points of each side.
        ok, text = _compare_at(None, [p.median for p in sides["better"]],
                               [p.median for p in sides["worse"]], factor, greater)
        return Verdict(HOLDS if ok else FAILS,
                       f"better and worse share no x, compared over all their points: {text}")
    if at == "largest_x":
        chosen = common[-1:]
    elif at == "smallest_x":
        chosen = common[:1]
    else:
        chosen = common
    results, texts = [], []
    for x in chosen:
        better = [p.median for p in sides["better"] if p.x == x]
        worse = [p.median for p in sides["worse"] if p.x == x]
        ok, text = _compare_at(ctx.x_text(x), better, worse, factor, greater)
        results.append(ok)
        texts.append(text)
    holds = any(results) if at == "some_x" else all(results)
    detail = (f"{window_text}: " if window_text else "") + "; ".join(texts)
    lonely = [ctx.x_text(x) for x in all_x if (x in xs_better) != (x in xs_worse)]
    if lonely and at in ("every_x", "some_x"):
        detail += f" (not compared, only one side measured: x={', '.join(lonely)})"
    return Verdict(HOLDS if holds else FAILS, detail)


def _x_window(check, ctx, xs):
    """xs within the check's optional x_min / x_max, and a text naming the window."""
    bounds = []
    for key, word in (("x_min", ">="), ("x_max", "<=")):
        if key not in check:
            continue
        limit = D.to_number(check[key], size=True)
        if limit is None:
            return None, f"the {check['kind']} check has a non-numeric '{key}'"
        bounds.append((key, limit, word))
    if not bounds:
        return xs, ""
    kept = []
    for x in xs:
        number = D.to_number(x, size=True)
        if number is None:
            return None, f"x_min / x_max need a numeric x, not '{ctx.x_text(x)}'"
        if all(number >= limit if key == "x_min" else number <= limit for key, limit, _ in bounds):
            kept.append(x)
    text = " and ".join(f"x {word} {ctx.x_text(limit)}" for _, limit, word in bounds)
    return kept, text


def _compare_at(x_text, better, worse, factor, greater):
    """One x: (holds, text) for min(better) > K*max(worse) or max(better) < K*min(worse)."""
    k = D.format_number(factor)
    where = f"at x={x_text}: " if x_text is not None else ""
    if greater:
        b, w = min(better), max(worse)
        ok = b > factor * w
        relation = ">" if ok else "is not >"
        return ok, (f"{where}min over better {D.format_number(b)} {relation} "
                    f"{k} x max over worse {D.format_number(w)}")
    b, w = max(better), min(worse)
    ok = b < factor * w
    relation = "<" if ok else "is not <"
    return ok, (f"{where}max over better {D.format_number(b)} {relation} "
                f"{k} x min over worse {D.format_number(w)}")


def _greater(check, y_field, ctx):
    return _compare(check, y_field, ctx, greater=True)


def _less(check, y_field, ctx):
    return _compare(check, y_field, ctx, greater=False)


# --- trend ---------------------------------------------------------------------

def _trend(check, y_field, ctx):
    direction = check.get("direction")
    if direction not in ("increasing", "decreasing"):
        return _unmeasurable(f"trend direction must be 'increasing' or 'decreasing', not '{direction}'")
    tolerance = D.to_number(check.get("tolerance", 0.0))
    if tolerance is None:
        return _unmeasurable("the trend check has a non-numeric 'tolerance'")
    where = check.get("where") or {}
    points, _ = ctx.points(y_field, where)
    if not points:
        return _unmeasurable(f"no point with a numeric '{y_field}' matches where {_where_text(where)}")
    by_series = {}
    for p in points:  # points come in x order within each series
        by_series.setdefault(p.series, []).append(p)
    texts, results, skipped = [], [], []
    for key, series_points in by_series.items():
        label = _series_text(ctx, key)
        if len(series_points) < 2:
            skipped.append(label)
            continue
        ok, text = _trend_one(ctx, label, series_points[0], series_points[-1], direction, tolerance)
        results.append(ok)
        texts.append(text)
    if not results:
        return _unmeasurable(f"no series has two x values to compare ({'; '.join(skipped)})")
    holds = all(results)
    # Name the failing series first (all of them when the claim holds), a few at most.
    shown = texts if holds else [t for t, ok in zip(texts, results) if not ok]
    summary = (f"all {len(results)} series {direction}" if holds
               else f"{len(shown)} of {len(results)} series not {direction}")
    detail = f"{summary}: " + "; ".join(shown[:_LISTED])
    if len(shown) > _LISTED:
        detail += f"; and {len(shown) - _LISTED} more"
    if skipped:
        detail += f" (one x only, not compared: {'; '.join(skipped)})"
    return Verdict(HOLDS if holds else FAILS, detail)


def _series_text(ctx, key):
    if not ctx.series_fields:
        return "all rows"
    return ", ".join(f"{n}={D.series_label((v,))}" for n, v in zip(ctx.series_fields, key))


def _trend_one(ctx, label, first, last, direction, tolerance):
    change = last.median - first.median
    if direction == "decreasing":
        change = -change
    ok = change > tolerance * abs(first.median)
    if first.median != 0:
        relative = f"{(last.median - first.median) / abs(first.median):+.1%}"
    else:
        relative = "from zero"
    verb = direction if ok else f"not {direction}"
    if tolerance:
        verb += f" by more than {tolerance:.1%}"
    return ok, (f"{label}: {D.format_number(first.median)} at x={ctx.x_text(first.x)} -> "
                f"{D.format_number(last.median)} at x={ctx.x_text(last.x)} ({relative}, {verb})")


# --- crossover: where one series catches up with another ---------------------------

def _series_by_x(ctx, y_field, where):
    """{x: median} of the points matching where (one value per x: the largest median)."""
    points, _ = ctx.points(y_field, where)
    out = {}
    for p in points:
        out[p.x] = max(out.get(p.x, p.median), p.median)
    return out


def _crossing(ctx, rising, reference):
    """(x, text) where rising first reaches reference over their common numeric x.

    Between the last x below and the first x at or above, the crossing is
    interpolated linearly in the differences, on a log x scale when every x is
    positive (sweeps like 1, 2, 4, ... 128). x is None when rising never reaches
    reference; the smallest x when it is already there.
    """
    xs = sorted((x for x in rising if x in reference), key=lambda x: D.to_number(x, size=True))
    numbers = [D.to_number(x, size=True) for x in xs]
    previous = None
    for x, number in zip(xs, numbers):
        diff = rising[x] - reference[x]
        if diff >= 0:
            if previous is None:
                return number, f"already at x={ctx.x_text(x)} ({_pair(rising[x], reference[x])})"
            px, pnum, pdiff = previous
            t = -pdiff / (diff - pdiff)
            if pnum > 0 and number > 0:
                crossing = pnum * (number / pnum) ** t
            else:
                crossing = pnum + t * (number - pnum)
            return crossing, (f"about x={D.format_number(crossing)} (x={ctx.x_text(px)}: "
                              f"{_pair(rising[px], reference[px])}; x={ctx.x_text(x)}: "
                              f"{_pair(rising[x], reference[x])})")
        previous = (x, number, diff)
    last = xs[-1]
    return None, f"not by x={ctx.x_text(last)} ({_pair(rising[last], reference[last])})"


def _pair(a, b):
    return f"{D.format_number(a)} vs {D.format_number(b)}"


def _crossing_sides(check, y_field, ctx, names):
    """{name: {x: median}} for each where clause the check names, or a Verdict."""
    out = {}
    for name in names:
        where = check.get(name) or {}
        values = _series_by_x(ctx, y_field, where)
        if not values:
            return _unmeasurable(f"no point with a numeric '{y_field}' matches {name} {_where_text(where)}")
        if any(D.to_number(x, size=True) is None for x in values):
            return _unmeasurable(f"the {check['kind']} check needs a numeric x")
        out[name] = values
    for name in names[:-1]:
        if not any(x in out[names[-1]] for x in out[name]):
            return _unmeasurable(f"{name} and {names[-1]} share no x")
    return out


def _crossover(check, y_field, ctx):
    """rising reaches reference at an x within [lo, hi] (anywhere measured without 'within')."""
    sides = _crossing_sides(check, y_field, ctx, ("rising", "reference"))
    if isinstance(sides, Verdict):
        return sides
    within = check.get("within")
    bounds = None
    if within is not None:
        bounds = [D.to_number(v, size=True) for v in within] if isinstance(within, list) else []
        if len(bounds) != 2 or None in bounds:
            return _unmeasurable("the crossover check's 'within' must be [low, high]")
    crossing, text = _crossing(ctx, sides["rising"], sides["reference"])
    if crossing is None:
        return Verdict(FAILS, f"rising never reaches reference: {text}")
    if bounds is None:
        return Verdict(HOLDS, f"rising reaches reference {text}")
    lo, hi = bounds
    ok = lo <= crossing <= hi
    word = "within" if ok else "outside"
    return Verdict(HOLDS if ok else FAILS,
                   f"rising reaches reference {text}, {word} "
                   f"[{D.format_number(lo)}, {D.format_number(hi)}]")


def _earlier(check, y_field, ctx):
    """earlier reaches reference at a smaller x than later does."""
    sides = _crossing_sides(check, y_field, ctx, ("earlier", "later", "reference"))
    if isinstance(sides, Verdict):
        return sides
    c_early, t_early = _crossing(ctx, sides["earlier"], sides["reference"])
    c_late, t_late = _crossing(ctx, sides["later"], sides["reference"])
    detail = f"earlier reaches reference {t_early}; later {t_late}"
    if c_early is None:
        return Verdict(FAILS, detail)
    ok = c_late is None or c_early < c_late
    return Verdict(HOLDS if ok else FAILS, detail)


# --- all: several checks, each on the same rows ----------------------------------------

def _all(check, rows, x_field, series_fields):
    checks = check.get("checks")
    if not isinstance(checks, list) or not checks or not all(isinstance(c, dict) for c in checks):
        return _unmeasurable("the all check needs a non-empty list of 'checks'")
    verdicts = [_evaluate_check(c, rows, x_field, series_fields) for c in checks]
    if any(v.verdict == FAILS for v in verdicts):
        overall = FAILS
    elif any(v.verdict == UNMEASURABLE for v in verdicts):
        overall = UNMEASURABLE
    else:
        overall = HOLDS
    detail = "; ".join(f"({i}) {c.get('kind')}: {v.verdict}: {v.detail}"
                       for i, (c, v) in enumerate(zip(checks, verdicts), start=1))
    return Verdict(overall, detail)


_CHECKS = {
    "at_most": _at_most,
    "at_least": _at_least,
    "greater": _greater,
    "less": _less,
    "trend": _trend,
    "crossover": _crossover,
    "earlier": _earlier,
}
