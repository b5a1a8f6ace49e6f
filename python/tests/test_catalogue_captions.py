"""Captions and claims that cannot drift from their entry's run (experiments/*.json).

A reader of a report sees an entry's caption and claim beside its figure, so what they name must
be what ran. For every entry:
- a flag (`--name`) named in the caption or the claim text is one the entry passes (args, quick
  args or a sweep); named with a value (`--lazy-refresh 0`), the entry passes that value (a
  quoted line of another command, `fabflow model pcie ...`, names that command's flags);
- a size (`4 B`, `16 KB`, `4 MB`) named in the caption lies within the sizes the entry runs
  (`-S`, with its quick and sweep values), where it runs sizes;
- an entry id named in a caption, note or claim is an entry of the catalogue, and no text says
  that something "has no entry" or "has no rows" (an absence is stated by the id it concerns);
- a caption says the plot does not draw a series only when the plot draws none beside y
  (`plot.y_extra`);
- a mechanism a caption or claim describes (MECHANISMS: the lazy space-notification cadence, a
  PUT that writes its item) is not one the entry's flags switch off, and no text says "fabflow
  lacks" something.
Every rule is also run against a spoiled copy of an entry, so that none of them passes by
construction.
"""

import copy
import glob
import json
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CATALOGUE = os.path.join(ROOT, "experiments")

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?: ([0-9][0-9A-Za-z.:]*|[a-z][a-z0-9]*(?:-[a-z0-9]+)*))?")
SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(B|KB|MB|GB)\b")
ENTRY_ID = re.compile(r"(?<![\w-])(\d{3}-(?:fig|table)[\w.-]*[\w])")
UNITS = {"B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30,
         "GB": 1 << 30, "": 1}
# Words that follow a boolean flag in prose, not values of it.
PROSE = {"is", "and", "or", "as", "the", "on", "in", "of", "with", "so", "at", "to", "for", "a",
         "an", "that", "which", "where", "rather", "instead", "when", "runs", "run", "off", "but"}


def entries():
    out = []
    for path in sorted(glob.glob(os.path.join(CATALOGUE, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out.extend(json.load(f)["experiments"])
    return out


def passed(entry):
    """Every flag the entry passes, with every value it passes it (args, quick, sweeps)."""
    flags = {}
    for args in (entry.get("args", {}), entry.get("quick", {}).get("args", {})):
        for k, v in args.items():
            flags.setdefault(k, set()).update(str(v).split(",") if v != "" else [""])
            flags[k].add(str(v))
    for sweep in entry.get("sweep", []):
        flags.setdefault(sweep["flag"], set()).update(str(v) for v in sweep.get("values", []))
    for flag, values in entry.get("quick", {}).get("sweep", {}).items():
        flags.setdefault(flag, set()).update(str(v) for v in values)
    return flags


def size_bytes(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?B?)", text.strip())
    if not m:
        return None
    return float(m.group(1)) * UNITS[m.group(2)]


def size_span(entry):
    """The smallest and largest size the entry runs (-S), or None when it runs no sizes."""
    values = passed(entry).get("-S")
    if not values:
        return None
    sizes = []
    for v in values:
        for part in re.split(r"[,:]", v):
            b = size_bytes(part)
            if b is not None:
                sizes.append(b)
    return (min(sizes), max(sizes)) if sizes else None


def problems(entry, ids):
    """What the entry's texts say that its run does not (one line each)."""
    out = []
    eid = entry["id"]
    caption = entry.get("caption", "")
    claim = entry.get("claim", {}).get("text", "") if isinstance(entry.get("claim"), dict) else ""
    note = entry.get("fidelity", {}).get("note", "")
    flags = passed(entry)
    for where, text in (("caption", caption), ("claim", claim)):
        # A quoted command line of another fabflow command (`fabflow model pcie ...`) names
        # that command's flags.
        text = re.sub(r"`fabflow (?!bench)[^`]*`", "", text)
        for flag, value in FLAG.findall(text):
            if flag not in flags:
                out.append(f"{eid}: the {where} names {flag}, which the entry does not pass")
                continue
            takes_value = any(v != "" for v in flags[flag])
            if value and takes_value and value not in PROSE and value not in flags[flag]:
                out.append(f"{eid}: the {where} names {flag} {value}, the entry passes "
                           f"{sorted(flags[flag])}")
    span = size_span(entry)
    if span:
        for number, unit in SIZE.findall(caption):
            b = float(number) * UNITS[unit]
            if not span[0] <= b <= span[1]:
                out.append(f"{eid}: the caption names {number} {unit}, outside the sizes the "
                           f"entry runs ({span[0]:.0f}-{span[1]:.0f} bytes)")
    for where, text in (("caption", caption), ("note", note), ("claim", claim)):
        for other in ENTRY_ID.findall(text):
            if other not in ids:
                out.append(f"{eid}: the {where} names {other}, which is no entry")
        for absent in re.findall(r"has no (?:entry|rows)", text):
            out.append(f"{eid}: the {where} says something {absent}; name the entry instead")
    if re.search(r"does not draw|not drawn|is not plotted", caption) and entry.get(
            "plot", {}).get("y_extra"):
        out.append(f"{eid}: the caption says a series is not drawn, but plot.y_extra draws one")
    for pattern, contradicts, what in MECHANISMS:
        for where, text in (("caption", caption), ("claim", claim)):
            if re.search(pattern, text) and contradicts(flags):
                out.append(f"{eid}: the {where} {what}")
    return out


# Mechanisms a text may describe, and when the entry's flags contradict the description.
MECHANISMS = [
    (r"lazy_refresh x capacity", lambda f: "0" in f.get("--lazy-refresh", set()),
     "describes the lazy space-notification cadence, the entry runs --lazy-refresh 0"),
    (r"writes the item", lambda f: "two-atomics" in f.get("--put-emulation", set()),
     "has the PUT write the item, the entry runs --put-emulation two-atomics (no WRITE)"),
    # What fabflow has is known: a text says it lacks nothing (it names the flag it runs or
    # says what the provider does instead).
    (r"fabflow lacks|fabflow has no", lambda f: True, "says fabflow lacks something"),
]


class CaptionsMatchTheirRuns(unittest.TestCase):
    def test_every_entry(self):
        all_entries = entries()
        ids = {e["id"] for e in all_entries}
        self.assertGreater(len(all_entries), 50)
        found = [p for e in all_entries for p in problems(e, ids)]
        self.assertEqual(found, [], "\n" + "\n".join(found))

    def test_each_rule_can_fail(self):
        by_id = {e["id"]: e for e in entries()}
        ids = set(by_id)

        def spoiled(eid, change):
            e = copy.deepcopy(by_id[eid])
            change(e)
            return problems(e, ids)

        # A flag the entry does not pass, and a flag with another value.
        self.assertTrue(spoiled("003-fig6.4", lambda e: e.update(
            caption=e["caption"] + " --capacity is the pool.")))
        self.assertTrue(spoiled("003-fig6.7", lambda e: e["args"].update(
            {"--lazy-refresh": "2"})))
        self.assertTrue(spoiled("003-fig6.5", lambda e: e["args"].pop("--lazy-refresh")))
        # A size outside the sweep.
        self.assertTrue(spoiled("003-fig6.6", lambda e: e["args"].update({"-S": "64,2K"}) or
                                e["quick"]["args"].update({"-S": "64,2K"})))
        # An id that is no entry, and an absence stated without one.
        self.assertTrue(spoiled("001-fig11", lambda e: e["fidelity"].update(
            note="Fig. 11a is 001-fig11z.")))
        self.assertTrue(spoiled("001-table5", lambda e: e["fidelity"].update(
            note="The RECV half has no rows.")))
        # A series said not drawn that is drawn.
        self.assertTrue(spoiled("003-fig6.12", lambda e: e.update(
            caption="The raw write, which this plot does not draw.")))
        # The lazy cadence described where --lazy-refresh 0 runs.
        self.assertTrue(spoiled("003-fig6.8", lambda e: e.update(
            caption="Consumers notify every lazy_refresh x capacity items.")))
        self.assertTrue(spoiled("001-fig10", lambda e: e.update(
            caption="A PUT takes the lock, writes the item and releases the lock.")))
        self.assertTrue(spoiled("003-fig6.3", lambda e: e["claim"].update(
            text="It needs a notification rule fabflow lacks.")))


if __name__ == "__main__":
    unittest.main()
