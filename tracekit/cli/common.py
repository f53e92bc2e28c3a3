"""Helpers shared by the commands: loading a trace with progress, formatting times."""

from __future__ import annotations

import sys

import click

from tracekit.trace.load import load_trace, stderr_progress
from tracekit.trace.model import Trace
from tracekit.units import fmt_us  # noqa: F401  (re-exported for the commands)

quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress or warnings on stderr.")


capture_option = click.option(
    "--capture", "captures", multiple=True, type=click.Path(), metavar="CAPTURE",
    help="Trace recorded around CUDA-graph capture (file or directory; repeatable): replayed kernels "
         "get the captured ops. A capture_traces/ folder beside TRACE is used without it.")


def load_for_cli(path: str, quiet: bool = False, captures: tuple[str, ...] = ()) -> Trace:
    """Load a trace, showing progress on a terminal for slow loads, then print its warnings."""
    progress = stderr_progress(quiet)
    trace = load_trace(path, progress=progress, captures=captures)
    if progress is not None:
        sys.stderr.write("\r\x1b[K")
    if not quiet:
        for warning in trace.warnings:
            click.echo(f"tracekit: warning: {warning}", err=True)
    return trace
