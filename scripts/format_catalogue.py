#!/usr/bin/env python3
"""Writes experiment catalogue files (experiments/*.json) in one layout: two-space indents, and
any object or list whose one-line form fits in 100 columns kept on one line.

    scripts/format_catalogue.py [--check] [FILE...]     (default: experiments/*.json)

--check changes nothing and exits 1 naming each file that is not in this layout.
"""
import glob
import json
import os
import sys

WIDTH = 100


def inline(value):
    return json.dumps(value, ensure_ascii=False)


def render(value, indent, prefix_len):
    """value as text at this indent; prefix_len is what precedes it on its first line."""
    one_line = inline(value)
    if not isinstance(value, (dict, list)) or not value or indent + prefix_len + len(one_line) <= WIDTH:
        return one_line
    inner = indent + 2
    pad = " " * inner
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = inline(k) + ": "
            items.append(pad + key + render(v, inner, len(key)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + render(v, inner, 0) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def formatted(text):
    return render(json.loads(text), 0, 0) + "\n"


def main(argv):
    check = "--check" in argv
    files = [a for a in argv if a != "--check"]
    if not files:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        files = sorted(glob.glob(os.path.join(root, "experiments", "*.json")))
    bad = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        out = formatted(text)
        if out == text:
            continue
        if check:
            print(f"{path}: not in the catalogue layout (run scripts/format_catalogue.py)")
            bad += 1
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
