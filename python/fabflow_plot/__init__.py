"""fabflow_plot: figures, claim verdicts and HTML pages for fabflow experiments.

The C++ runner writes one JSONL file per experiment (a header line describing the
catalogue entry, provider and machine, then the bench's JSON rows).  This package
reads such files and produces, per experiment, a PNG and SVG figure, a verdict on
the entry's claim and an HTML page, plus an index page over a whole directory.

Modules: data (loading, filtering, aggregation), claims (verdicts), figure
(matplotlib drawing), page (HTML), cli (the command line).
"""
