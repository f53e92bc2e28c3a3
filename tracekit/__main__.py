"""`python -m tracekit` runs the CLI."""

import sys

from tracekit.cli import main

sys.exit(main())
