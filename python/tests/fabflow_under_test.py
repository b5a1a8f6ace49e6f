"""The fabflow package the binding tests run against, and what they share.

FABFLOW_PYTHON_INSTALLED=1 (the test command, in the virtual environment `pip install ./python`
made): the installed package, never python/fabflow, which has no compiled module. Else
FABFLOW_PYTHON_BUILD: the build tree's package (a missing module fails the tests). Else
build/python when it holds one (skipped otherwise). fabflow launch is $FABFLOW_CLI, else
build/fabflow.
"""

import importlib
import os
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(REPO, "python")
INSTALLED = os.environ.get("FABFLOW_PYTHON_INSTALLED") == "1"
BUILD = os.environ.get("FABFLOW_PYTHON_BUILD") or os.path.join(REPO, "build", "python")
REQUIRED = INSTALLED or bool(os.environ.get("FABFLOW_PYTHON_BUILD"))
CLI = os.environ.get("FABFLOW_CLI") or os.path.join(REPO, "build", "fabflow")


def _load():
    saved = list(sys.path)
    for name in [m for m in sys.modules if m == "fabflow" or m.startswith("fabflow.")]:
        del sys.modules[name]
    if INSTALLED:
        sys.path[:] = [p for p in sys.path
                       if p not in ("", ".") and os.path.realpath(p) != os.path.realpath(SOURCE)]
    else:
        sys.path.insert(0, BUILD)
    try:
        return importlib.import_module("fabflow")
    except ImportError:
        if REQUIRED:
            raise
        return None
    finally:
        sys.path[:] = saved


fabflow = _load()
# The environment a rank's script needs to import the same package.
RANK_ENV = dict(os.environ) if INSTALLED else dict(os.environ, PYTHONPATH=BUILD)


def run_ranks(testcase, *bodies, n=None, timeout=60):
    """Runs body i on thread rank i (of n, default len(bodies)); returns their exceptions."""
    ranks = fabflow.thread_ranks(n or len(bodies))
    errors = []

    def run(body, rank):
        try:
            body(rank)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b, r)) for b, r in zip(bodies, ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    testcase.assertFalse(any(t.is_alive() for t in threads),
                         f"a rank did not finish; the others raised {errors}")
    return errors
