"""Checking a catalogue entry's claim against the measured data.

The data rows (already filtered by the entry's "rows" and without refused rows)
are narrowed by each check's "where" clause, grouped by (series, x) and reduced
to the median over repeats; the check then compares those medians.  Every
verdict carries a detail string naming the numbers compared, so a reader can
see why it came out as it did.

Signal against noise: a comparison, bound or trend holds only when the claim
holds for every repeat's extreme (the ranges of the repeats do not overlap
across the line the claim draws); it does not hold when the medians contradict
the claim; in between it is "inconclusive here", with the ranges in the detail.
With one repeat per point the range is the point itself.  The rows of the entry's reference (a
model's series) take part only in the row groups that name the field reference_model; every
other group compares measured rows alone.  Check kinds: at_most, at_least, greater, less,
trend, similar, differ, crossover, earlier, and all (several checks that must all hold); see the
contract in docs.  A substitute entry's verdict reads "substitute holds here" or
"substitute does not hold here".
"""

import dataclasses
import json

from . import data as D

HOLDS = "holds here"
FAILS = "does not hold here"
UNMEASURABLE = "not measurable here"
# The medians agree with the claim but the repeats' ranges overlap: the difference is within
# the run-to-run spread, so the run cannot tell.
INCONCLUSIVE = "inconclusive here"
# An entry whose fidelity is "substitute" measures another quantity or mechanism than the
# paper's; its verdict says so, never the bare "holds here".
SUBSTITUTE_HOLDS = "substitute holds here"
SUBSTITUTE_FAILS = "substitute does not hold here"

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
        wanted = D.names_reference(where)
        chosen = [r for r in self.rows
                  if D.is_reference(r) == wanted and D.row_matches(r, where)]
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


def fidelity(entry):
    """The entry's fidelity kind: faithful, substitute or not_measurable."""
    f = entry.get("fidelity")
    return f.get("kind", "faithful") if isinstance(f, dict) else "faithful"


def evaluate(entry, rows, x_field, series_fields, empty_reason="", references=()):
    """The verdict for an entry's claim on the given data rows (and the reference's rows, for
    the groups that name them)."""
    substitute = fidelity(entry) == "substitute"
    verdict = _evaluate_claim(entry, rows, x_field, series_fields, empty_reason, list(references),
                              substitute)
    return Verdict(_word(verdict.verdict, substitute), verdict.detail)


def _word(verdict, substitute):
    """A verdict as a substitute entry says it: never the bare "holds here" (parts included)."""
    if not substitute:
        return verdict
    return {HOLDS: SUBSTITUTE_HOLDS, FAILS: SUBSTITUTE_FAILS}.get(verdict, verdict)


def _evaluate_claim(entry, rows, x_field, series_fields, empty_reason, references, substitute):
    claim = entry.get("claim")
    if not isinstance(claim, dict):
        return _unmeasurable("the entry states no claim")
    check = claim.get("check")
    if not isinstance(check, dict):
        return _unmeasurable("the claim has no check")
    if not rows:
        if check.get("kind") in _CHECKS or check.get("kind") == "all":
            return _unmeasurable(f"no data: {empty_reason or 'no rows left after filtering'}")
    return _evaluate_check(check, list(rows) + references, x_field, series_fields, substitute)


def _evaluate_check(check, rows, x_field, series_fields, substitute=False):
    kind = check.get("kind")
    if kind == "all":
        return _all(check, rows, x_field, series_fields, substitute)
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
    # Medians on the right side, but some repeat on the wrong one.
    unclear = [p for p in points if p not in bad and not (p.high <= limit if at_most else p.low >= limit)]
    if not bad and unclear:
        listed = "; ".join(f"{D.format_number(p.median)} (repeats {_range_text(p)}) at {ctx.describe(p)}"
                           for p in unclear[:_LISTED])
        return Verdict(INCONCLUSIVE, f"every median of {y_field} is {op} {limit_text}, but the repeats of "
                                     f"{len(unclear)} point(s) cross it: {listed}")
    if not bad:
        extreme = (max if at_most else min)(points, key=lambda p: p.median)
        word = "largest" if at_most else "smallest"
        return Verdict(HOLDS, f"all {len(points)} point(s) of {y_field} are {op} {limit_text}; "
                              f"{word} {D.format_number(extreme.median)} at {ctx.describe(extreme)}")
    listed = "; ".join(f"{D.format_number(p.median)} at {ctx.describe(p)}" for p in bad[:_LISTED])
    more = f"; and {len(bad) - _LISTED} more" if len(bad) > _LISTED else ""
    return Verdict(FAILS, f"{len(bad)} of {len(points)} point(s) of {y_field} are {bad_word} "
                          f"{limit_text}: {listed}{more}")


def _range_text(point):
    return f"{D.format_number(point.low)}..{D.format_number(point.high)}"


def _three_way(results, any_suffices=False):
    """HOLDS / FAILS / INCONCLUSIVE from per-x results True / False / None (within the spread)."""
    if any_suffices:
        if any(r is True for r in results):
            return HOLDS
        return FAILS if all(r is False for r in results) else INCONCLUSIVE
    if any(r is False for r in results):
        return FAILS
    return HOLDS if all(r is True for r in results) else INCONCLUSIVE


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
        ok, text = _compare_at(None, sides["better"], sides["worse"], factor, greater)
        return Verdict(_three_way([ok]),
                       f"better and worse share no x, compared over all their points: {text}")
    if at == "largest_x":
        chosen = common[-1:]
    elif at == "smallest_x":
        chosen = common[:1]
    else:
        chosen = common
    results, texts = [], []
    for x in chosen:
        better = [p for p in sides["better"] if p.x == x]
        worse = [p for p in sides["worse"] if p.x == x]
        ok, text = _compare_at(ctx.x_text(x), better, worse, factor, greater)
        results.append(ok)
        texts.append(text)
    verdict = _three_way(results, any_suffices=at == "some_x")
    detail = (f"{window_text}: " if window_text else "") + "; ".join(texts)
    lonely = [ctx.x_text(x) for x in all_x if (x in xs_better) != (x in xs_worse)]
    if lonely and at in ("every_x", "some_x"):
        detail += f" (not compared, only one side measured: x={', '.join(lonely)})"
    return Verdict(verdict, detail)


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
    """One x: (result, text) for min(better) > K*max(worse) or max(better) < K*min(worse).

    better and worse are points; the medians decide whether the claim is contradicted
    (result False); it holds (True) only when the repeats' ranges also stay apart, the
    better side's worst repeat against the worse side's best; else None (within the spread).
    """
    k = D.format_number(factor)
    where = f"at x={x_text}: " if x_text is not None else ""
    if greater:
        b, w = min(p.median for p in better), max(p.median for p in worse)
        b_edge, w_edge = min(p.low for p in better), max(p.high for p in worse)
        ok, clear = b > factor * w, b_edge > factor * w_edge
        words = ("min over better", ">", "max over worse")
    else:
        b, w = max(p.median for p in better), min(p.median for p in worse)
        b_edge, w_edge = max(p.high for p in better), min(p.low for p in worse)
        ok, clear = b < factor * w, b_edge < factor * w_edge
        words = ("max over better", "<", "min over worse")
    relation = words[1] if ok else f"is not {words[1]}"
    text = (f"{where}{words[0]} {D.format_number(b)} {relation} {k} x {words[2]} "
            f"{D.format_number(w)}")
    if ok and not clear:
        text += (f", within the spread (repeats reach {D.format_number(b_edge)} against "
                 f"{D.format_number(w_edge)})")
        return None, text
    return ok, text


def _greater(check, y_field, ctx):
    return _compare(check, y_field, ctx, greater=True)


def _less(check, y_field, ctx):
    return _compare(check, y_field, ctx, greater=False)


# --- similar: the paper's "negligible difference" ------------------------------------

def _similar(check, y_field, ctx):
    """At the x values named by `at`, the points matching where lie within a relative tolerance.

    min >= (1 - tolerance) x max over the medians at each x; it holds only when the repeats'
    extremes are within it too (min of the lows against max of the highs).
    """
    tolerance = D.to_number(check.get("tolerance"))
    if tolerance is None or not 0 < tolerance < 1:
        return _unmeasurable("the similar check needs a 'tolerance' between 0 and 1")
    return _spread_check(check, y_field, ctx, lambda lo, hi: lo >= (1 - tolerance) * hi,
                         f"within {tolerance:.0%} of")


def _differ(check, y_field, ctx):
    """At the x values named by `at`, the points matching where differ: max >= factor x min.

    For the papers' "depends on" findings; it holds only when even the repeats' closest
    extremes (max of the lows against min of the highs) are that far apart.
    """
    factor = D.to_number(check.get("factor"))
    if factor is None or not factor > 1:
        return _unmeasurable("the differ check needs a 'factor' above 1")
    return _spread_check(check, y_field, ctx, lambda lo, hi: hi >= factor * lo,
                         f"at least {D.format_number(factor)}x apart from", apart=True)


def _spread_check(check, y_field, ctx, holds, relation, apart=False):
    """similar and differ: per x, the smallest and largest point matching where, and holds(lo, hi)."""
    at = check.get("at", "every_x")
    if at not in _AT:
        return _unmeasurable(f"unknown 'at' value '{at}' (expected one of {', '.join(_AT)})")
    where = check.get("where") or {}
    points, _ = ctx.points(y_field, where)
    by_x = {}
    for p in points:
        by_x.setdefault(p.x, []).append(p)
    _, all_x = ctx.points(y_field, {})
    xs = [x for x in all_x if len(by_x.get(x, [])) >= 2]
    xs, window_text = _x_window(check, ctx, xs)
    if xs is None:
        return _unmeasurable(window_text)
    if not xs:
        return _unmeasurable(f"no x {window_text + ' ' if window_text else ''}has two points "
                             f"matching where {_where_text(where)} to compare")
    if at == "largest_x":
        xs = xs[-1:]
    elif at == "smallest_x":
        xs = xs[:1]
    results, texts = [], []
    for x in xs:
        group = by_x[x]
        low = min(group, key=lambda p: p.median)
        high = max(reversed(group), key=lambda p: p.median)  # equal medians: two series named
        ok = holds(low.median, high.median)
        if apart:  # the repeats' closest pair: the largest low against the smallest high
            clear = holds(min(p.high for p in group), max(p.low for p in group))
        else:      # the repeats' farthest pair
            clear = holds(min(p.low for p in group), max(p.high for p in group))
        spread = 1 - low.median / high.median if high.median else 0.0
        text = (f"at x={ctx.x_text(x)}: {D.format_number(low.median)} ({_series_text(ctx, low.series)}) "
                f"{'is' if ok else 'is not'} {relation} {D.format_number(high.median)} "
                f"({_series_text(ctx, high.series)}), {spread:.1%} apart")
        if ok and not clear:
            text += ", but the repeats are not"
            ok = None
        results.append(ok)
        texts.append(text)
    detail = (f"{window_text}: " if window_text else "") + "; ".join(texts)
    return Verdict(_three_way(results, any_suffices=at == "some_x"), detail)


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
    verdict = _three_way(results)
    # Name the series that decide (all of them when the claim holds), a few at most.
    if verdict == HOLDS:
        shown = texts
        summary = f"all {len(results)} series {direction}"
    elif verdict == FAILS:
        shown = [t for t, ok in zip(texts, results) if ok is False]
        summary = f"{len(shown)} of {len(results)} series not {direction}"
    else:
        shown = [t for t, ok in zip(texts, results) if ok is None]
        summary = f"{len(shown)} of {len(results)} series {direction} only within the spread"
    detail = f"{summary}: " + "; ".join(shown[:_LISTED])
    if len(shown) > _LISTED:
        detail += f"; and {len(shown) - _LISTED} more"
    if skipped:
        detail += f" (one x only, not compared: {'; '.join(skipped)})"
    return Verdict(verdict, detail)


def _series_text(ctx, key):
    if not ctx.series_fields:
        return "all rows"
    return ", ".join(f"{n}={D.series_label((v,))}" for n, v in zip(ctx.series_fields, key))


def _trend_one(ctx, label, first, last, direction, tolerance):
    """(result, text): the change from the first x to the last, past the tolerance.

    False when the medians' change is not; True when even the repeats' closest pair (the
    first's highest against the last's lowest, when increasing) changes past it; else None.
    """
    change = last.median - first.median
    closest = last.low - first.high
    if direction == "decreasing":
        change = -change
        closest = first.low - last.high
    ok = change > tolerance * abs(first.median)
    clear = closest > tolerance * abs(first.median)
    if first.median != 0:
        relative = f"{(last.median - first.median) / abs(first.median):+.1%}"
    else:
        relative = "from zero"
    verb = direction if ok else f"not {direction}"
    if tolerance:
        verb += f" by more than {tolerance:.1%}"
    text = (f"{label}: {D.format_number(first.median)} at x={ctx.x_text(first.x)} -> "
            f"{D.format_number(last.median)} at x={ctx.x_text(last.x)} ({relative}, {verb})")
    if ok and not clear:
        return None, text + (f", within the spread (repeats {_range_text(first)} -> "
                             f"{_range_text(last)})")
    return ok, text


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

def _all(check, rows, x_field, series_fields, substitute=False):
    checks = check.get("checks")
    if not isinstance(checks, list) or not checks or not all(isinstance(c, dict) for c in checks):
        return _unmeasurable("the all check needs a non-empty list of 'checks'")
    verdicts = [_evaluate_check(c, rows, x_field, series_fields, substitute) for c in checks]
    if any(v.verdict == FAILS for v in verdicts):
        overall = FAILS
    elif any(v.verdict == UNMEASURABLE for v in verdicts):
        overall = UNMEASURABLE
    elif any(v.verdict == INCONCLUSIVE for v in verdicts):
        overall = INCONCLUSIVE
    else:
        overall = HOLDS
    detail = "; ".join(f"({i}) {c.get('kind')}: {_word(v.verdict, substitute)}: {v.detail}"
                       for i, (c, v) in enumerate(zip(checks, verdicts), start=1))
    return Verdict(overall, detail)


_CHECKS = {
    "at_most": _at_most,
    "at_least": _at_least,
    "greater": _greater,
    "less": _less,
    "trend": _trend,
    "similar": _similar,
    "differ": _differ,
    "crossover": _crossover,
    "earlier": _earlier,
}
