"""Helpers shared by the commands: loading a trace with progress, formatting times."""

from __future__ import annotations

import sys

import click

from tracekit.analyzers.analysis import Analysis
from tracekit.trace.load import load_trace, stderr_progress
from tracekit.trace.model import Trace
from tracekit.units import fmt_us  # noqa: F401  (re-exported for the commands)

quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress or warnings on stderr.")


def load_for_cli(path: str, quiet: bool = False) -> Trace:
    """Load a trace, showing progress on a terminal for slow loads, then print its warnings."""
    progress = stderr_progress(quiet)
    trace = load_trace(path, progress=progress)
    if progress is not None:
        sys.stderr.write("\r\x1b[K")
    if not quiet:
        for warning in trace.warnings:
            click.echo(f"tracekit: warning: {warning}", err=True)
    return trace


steps_option = click.option(
    "--steps", default="steady", show_default=True, metavar="steady|all|N-M",
    help="Steps the headline numbers cover: the steady ones (set-up, warm-up, partial and outlier "
         "steps left out and listed), all of them, or a range of step numbers.",
)


def analyze_for_cli(trace: Trace, *, steps: str = "steady", **options: object) -> Analysis:
    """analyze() with a bad --steps value turned into a usage error."""
    from tracekit.analyzers.analysis import analyze
    from tracekit.analyzers.steady import StepsError

    try:
        return analyze(trace, steps=steps, **options)  # type: ignore[arg-type]
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
