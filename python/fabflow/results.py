"""Benchmark and experiment results as records: fabflow.results.load(path).

Reads the JSON lines `fabflow bench ... --json` prints (one object per line) and the files of
`fabflow experiment run` (a header line, then the bench's rows). Returns a pandas DataFrame when
pandas is installed and asked for, else a list of dicts; nested objects (environment, latency)
stay dicts.
"""

import json


def load(path, frame=None):
    """The rows of the JSON-lines file at `path`.

    frame=None gives a pandas DataFrame when pandas can be imported, else a list of dicts;
    frame=False always the list; frame=True a DataFrame (ImportError without pandas). A line
    that is not a JSON object raises ValueError naming the file and line.
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON line ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")
            rows.append(row)
    if frame is False:
        return rows
    try:
        import pandas
    except ImportError:
        if frame:
            raise
        return rows
    return pandas.DataFrame(rows)
