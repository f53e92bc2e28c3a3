"""Ctrl-C while the CLI starts up (its imports, before main()): one line and exit 130, no traceback."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # builtin: the signal module would import enum first
import os
import sys

# What argv[0] is while the CLI starts: `python -m tracekit...` being located, or the console script.
_CLI_NAMES = ("tracekit", "tracekit.exe", "tracekit-script.py")


def _interrupted(signum: int, frame: object) -> None:
    try:
        for stream in (sys.stdout, sys.stderr):  # what the command printed before (a re-entrant flush fails)
            try:  # noqa: SIM105 - no contextlib import here (this module loads before any other)
                stream.flush()
            except Exception:
                pass
        os.write(2, b"tracekit: interrupted\n")
    finally:
        os._exit(128 + signum)


def install(early: object = None) -> None:
    """While the CLI starts, Ctrl-C prints one line and exits 130 (nothing to clean up yet). `early`:
    the package's own handler for the moments before this module loaded, replaced by this one."""
    argv0 = (getattr(sys, "argv", None) or [""])[0]
    if argv0 != "-m" and os.path.basename(argv0) not in _CLI_NAMES:
        return  # imported as a library: Python's own KeyboardInterrupt
    try:
        current = _signal.getsignal(_signal.SIGINT)
        if current is _signal.default_int_handler or (early is not None and current is early):
            _signal.signal(_signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread
        pass


def at_exit() -> None:
    """Once the command has finished: Ctrl-C during the interpreter's shutdown (atexit handlers,
    threads the script left, finalizers) prints one line and exits 130 too."""
    try:  # noqa: SIM105 - as above
        _signal.signal(_signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread
        pass


def restore() -> None:
    """Give Ctrl-C back to Python (KeyboardInterrupt) once an entry point handles it."""
    try:
        if _signal.getsignal(_signal.SIGINT) is _interrupted:
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    except ValueError:
        pass
