"""Negative and positive controls for every claim check of the catalogue (experiments/*.json).

For each entry with a check, rows are synthesised from the check itself: once agreeing with the
claim (the verdict must be "holds"), once contradicting it (it must be "does not hold"). The rows
go through the same path as a real run (the entry's row filter, the plot's x and series, then
the claim), so a checker that can never say "does not hold" (or never "holds") fails here, and
so does a catalogue edit that names a field the check cannot reach.

The synthesis knows each check kind's contract (docs/experiments.md, "Claim checks"):
- at_most / at_least: every point on the right side of the value, or every point on the wrong;
- greater / less: the better side beats the worse by twice the factor at every x, or loses by
  half of it at every x (so every `at` and every x window agrees);
- trend: every series moves well past the tolerance in the direction, or stays flat;
- similar: two series level with each other, or apart by twice the tolerance;
- differ: two series apart by twice the factor, or level;
- crossover: the rising side meets the reference inside `within` (at its geometric middle), or
  never reaches it; earlier: the earlier side meets the reference first, or never;
- all: each part is controlled on its own rows; the whole must fail when any part's
  contradicting rows are given (a failing part outweighs the others' lack of data).
Each point is written three times with a 1 % spread, as repeats are.
"""

import copy
import fnmatch
import glob
import json
import math
import os
import unittest

from fabflow_plot import claims as C
from fabflow_plot import data as D

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CATALOGUE = os.path.join(ROOT, "experiments")

GRID = [4 ** i for i in range(13)]  # 1 .. 16M: covers every x window the catalogue uses
REPEATS = (0.99, 1.0, 1.01)
BASE = 100.0

_SIDES = {"greater": ("better", "worse"), "less": ("better", "worse"),
          "crossover": ("rising", "reference"), "earlier": ("earlier", "later", "reference")}


def concrete(wanted):
    """A value that value_matches(value, wanted) accepts: the first of a list, a glob filled in."""
    if isinstance(wanted, list):
        return concrete(wanted[0])
    if isinstance(wanted, str) and any(c in wanted for c in "*?["):
        text = wanted.replace("*", "x").replace("?", "x")
        while "[" in text:  # a character class: its first character
            start = text.index("[")
            end = text.index("]", start)
            text = text[:start] + text[start + 1:end].lstrip("!")[:1] + text[end + 1:]
        assert fnmatch.fnmatchcase(text, wanted), (text, wanted)
        return text
    return wanted


def set_field(row, name, value):
    """Writes a field as the bench would: the runner's point.<flag> keys flat, others nested."""
    if name.startswith("point."):
        row[name] = value
        return
    *heads, last = name.split(".")
    obj = row
    for h in heads:
        obj = obj.setdefault(h, {})
    obj[last] = value


class Synth:
    """Rows for one entry's check."""

    def __init__(self, entry):
        self.entry = entry
        plot = entry["plot"]
        self.x_field = plot["x"]
        series = plot.get("series") or []
        self.series = [series] if isinstance(series, str) else list(series)
        self.rows = []

    def base_row(self, where, side_name):
        row = {}
        for name, value in (self.entry.get("rows") or {}).items():
            set_field(row, name, concrete(value))
        # Series fields the where clause leaves open get a value of this side's own, so that
        # one side's rows never fall into another side's where.
        for name in self.series:
            set_field(row, name, f"{side_name}-series")
        for name, value in (where or {}).items():
            set_field(row, name, concrete(value))
        return row

    def xs_of(self, where, grid):
        """The x values of a side: its where's own x (or list of them) when it names one, else the grid."""
        fixed = self.entry.get("rows") or {}
        if self.x_field in fixed and self.x_field not in (where or {}):
            return [concrete(fixed[self.x_field])]  # the row filter fixes x (e.g. path=fabric)
        if self.x_field in (where or {}):
            wanted = where[self.x_field]
            return [concrete(w) for w in wanted] if isinstance(wanted, list) else [concrete(wanted)]
        return grid

    def add(self, check, where, side_name, y_of_x, grid=GRID):
        """Rows of one side: y_of_x(index, x) is the value the check sees (after y_divide_by)."""
        xs = self.xs_of(where, grid)
        divide_by = check.get("y_divide_by")
        for i, x in enumerate(xs):
            target = y_of_x(i, len(xs), x)
            for k, spread in enumerate(REPEATS):
                row = self.base_row(where, side_name)
                set_field(row, self.x_field, x)
                divisor = 1.0
                if divide_by:
                    if divide_by == self.x_field:
                        divisor = D.to_number(x, size=True)
                    else:
                        set_field(row, divide_by, 1.0)
                set_field(row, check["y"], target * spread * divisor)
                row["repeat_index"] = k
                self.rows.append(row)


def _scale_of(value):
    return max(abs(value), 1.0)


def synthesise(entry, check, agree, variant=0):
    """Rows that agree with (or contradict) one check (not an 'all') of the entry.

    variant 1 is a second way to contradict, for the kinds that have one: a crossover outside
    its window (where it has one), the later side reaching the reference first.
    """
    s = Synth(entry)
    kind = check["kind"]
    if kind in ("at_most", "at_least"):
        v = float(check["value"])
        inside = v - _scale_of(v) / 2 if kind == "at_most" else v + _scale_of(v)
        outside = v + _scale_of(v) if kind == "at_most" else v - _scale_of(v) / 2
        if kind == "at_most" and agree and v >= 0:
            inside = v / 2  # stay non-negative (e.g. a count that must be 0)
        y = inside if agree else outside
        s.add(check, check.get("where"), "where", lambda i, n, x: y)
    elif kind in ("greater", "less"):
        f = float(check.get("factor", 1.0))
        if kind == "greater":
            better = 2 * f * BASE if agree else 0.5 * f * BASE
        else:
            better = 0.5 * f * BASE if agree else 2 * f * BASE
        s.add(check, check.get("better"), "better", lambda i, n, x: better)
        s.add(check, check.get("worse"), "worse", lambda i, n, x: BASE)
    elif kind == "trend":
        t = float(check.get("tolerance", 0.0))
        k = 10 * (1 + t)  # the whole change, relative to the first point: well past t

        def y(i, n, x):
            if not agree or n < 2:
                return BASE
            step = i / (n - 1)
            if check["direction"] == "increasing":
                return BASE * (1 + k * step)
            return BASE / (1 + k * step)
        s.add(check, check.get("where"), "where", y)
    elif kind == "similar":
        t = float(check["tolerance"])
        where = check.get("where") or {}
        one, two = where, where  # unconstrained series fields differ by the side's name
        for name in s.series:
            if isinstance(where.get(name), list) and len(where[name]) >= 2:
                one, two = dict(where, **{name: where[name][0]}), dict(where, **{name: where[name][1]})
                break
        s.add(check, one, "one", lambda i, n, x: BASE)
        s.add(check, two, "two", lambda i, n, x: BASE if agree else BASE * (1 - t) / 2)
    elif kind == "differ":
        f = float(check["factor"])
        where = check.get("where") or {}
        one, two = where, where
        for name in s.series:
            if isinstance(where.get(name), list) and len(where[name]) >= 2:
                one, two = dict(where, **{name: where[name][0]}), dict(where, **{name: where[name][1]})
                break
        s.add(check, one, "one", lambda i, n, x: BASE)
        s.add(check, two, "two", lambda i, n, x: BASE * 2 * f if agree else BASE)
    elif kind == "crossover":
        within = check.get("within")
        lo, hi = ((D.to_number(within[0], size=True), D.to_number(within[1], size=True))
                  if within else (GRID[2], GRID[-3]))
        meet = math.sqrt(lo * hi) if lo > 0 else hi / 2
        grid = sorted(set([g for g in GRID if g < lo] + [lo, meet, hi] + [g for g in GRID if g > hi]))
        if not agree and variant == 1:
            meet = hi * 4  # reached, but past the window
            grid.append(meet)
        s.add(check, check.get("reference"), "reference", lambda i, n, x: BASE, grid)
        s.add(check, check.get("rising"), "rising",
              (lambda i, n, x: BASE * x / meet) if agree or variant == 1 else (lambda i, n, x: BASE / 2),
              grid)
    elif kind == "earlier":
        s.add(check, check.get("reference"), "reference", lambda i, n, x: BASE)
        early, late = GRID[3], GRID[8]
        if not agree and variant == 1:
            early, late = late, early  # both reach it, the later side first
        s.add(check, check.get("earlier"), "earlier",
              (lambda i, n, x: BASE * x / early) if agree or variant == 1 else (lambda i, n, x: BASE / 2))
        s.add(check, check.get("later"), "later", lambda i, n, x: BASE * x / late)
    else:
        raise AssertionError(f"{entry['id']}: no synthesis for check kind '{kind}'")
    return s.rows


_CONTRADICTIONS = {"crossover": (0, 1), "earlier": (0, 1)}


def judge(entry, check, rows):
    """The verdict of `check` (in place of the entry's) over rows, the way a run judges them."""
    judged = copy.deepcopy(entry)
    judged["claim"]["check"] = check
    exp = D.Experiment(path="controls.jsonl", header={"type": "experiment", "id": entry["id"],
                                                     "entry": judged}, rows=rows)
    pdata = D.prepare(exp)
    return C.evaluate(judged, pdata.rows, pdata.x_field, pdata.series_fields, pdata.empty_reason)


def catalogue_entries():
    out = []
    for path in sorted(glob.glob(os.path.join(CATALOGUE, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out += json.load(f)["experiments"]
    return out


class CatalogueControlsTest(unittest.TestCase):
    def expected(self, entry, agree):
        substitute = C.fidelity(entry) == "substitute"
        if agree:
            return C.SUBSTITUTE_HOLDS if substitute else C.HOLDS
        return C.SUBSTITUTE_FAILS if substitute else C.FAILS

    @staticmethod
    def variants(check, agree):
        if agree:
            return (0,)
        if check["kind"] == "crossover" and not check.get("within"):
            return (0,)  # reached anywhere holds: never reaching is the only contradiction
        return _CONTRADICTIONS.get(check["kind"], (0,))

    def control(self, entry, check, agree, label=""):
        for variant in self.variants(check, agree):
            rows = synthesise(entry, check, agree, variant)
            verdict = judge(entry, check, rows)
            want = self.expected(entry, agree)
            self.assertEqual(verdict.verdict, want,
                             f"{entry['id']}{label}: rows {'agreeing with' if agree else 'contradicting'}"
                             f" the claim (variant {variant}) gave '{verdict.verdict}': {verdict.detail}")

    def test_every_check_can_hold_and_can_fail(self):
        checked = 0
        for entry in catalogue_entries():
            check = (entry.get("claim") or {}).get("check")
            if not check or C.fidelity(entry) == "not_measurable":
                continue
            with self.subTest(entry=entry["id"]):
                if check["kind"] == "all":
                    parts = check["checks"]
                    for n, part in enumerate(parts, start=1):
                        self.control(entry, part, True, f" part {n}")
                        # One part contradicted fails the whole, whatever the others see.
                        self._whole_fails(entry, check, part, n)
                else:
                    self.control(entry, check, True)
                    self.control(entry, check, False)
                checked += 1
        self.assertGreaterEqual(checked, 45)

    def _whole_fails(self, entry, whole, part, n):
        for variant in self.variants(part, agree=False):
            verdict = judge(entry, whole, synthesise(entry, part, False, variant))
            self.assertEqual(verdict.verdict, self.expected(entry, False),
                             f"{entry['id']}: part {n} contradicted (variant {variant}), the whole "
                             f"said '{verdict.verdict}': {verdict.detail}")

    def test_a_checker_that_cannot_fail_is_caught(self):
        """The controls themselves: with a comparison deleted, a control fails."""
        entry = {"id": "900-x", "plot": {"x": "size", "y": "MBps", "series": ["design"]}, "rows": {},
                 "fidelity": {"kind": "faithful"},
                 "claim": {"text": "t", "check": {"kind": "greater", "y": "MBps",
                                                  "better": {"design": "a"},
                                                  "worse": {"design": "b"}}}}
        check = entry["claim"]["check"]
        original = C._compare_at
        C._compare_at = lambda x_text, better, worse, factor, greater: (True, "always")
        try:
            self.assertEqual(judge(entry, check, synthesise(entry, check, False)).verdict, C.HOLDS)
        finally:
            C._compare_at = original
        self.assertEqual(judge(entry, check, synthesise(entry, check, False)).verdict, C.FAILS)


if __name__ == "__main__":
    unittest.main()
