"""`python -m tracekit` runs the CLI (Ctrl-C or SIGTERM while it starts up end in one line too)."""

import signal
import sys

from tracekit.errors import Terminated, raise_terminated

signal.signal(signal.SIGTERM, raise_terminated)
try:
    from tracekit.cli import leave, main
except KeyboardInterrupt:
    sys.stderr.write("tracekit: interrupted\n")
    sys.exit(130)
except Terminated as exc:
    sys.stderr.write("tracekit: terminated\n")
    sys.exit(128 + exc.signum)

leave(main())
