"""Entry point for `python3 -m fabflow_plot`."""

import sys

from .cli import main

sys.exit(main())
