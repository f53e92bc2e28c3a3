"""`tracekit calibrate`: time a null loop with and without torch.profiler here; write what the profiler costs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracekit.errors import OutputError
from tracekit.profile.calibrate import DEFAULT_ITERATIONS, DEFAULT_NAME
from tracekit.terminal import visible_lines


@click.command(short_help="Measure what torch.profiler costs per recorded event on this machine; write it as JSON.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Calibration file to write (default: {DEFAULT_NAME} in the working directory).",
)
@click.option("--force", is_flag=True, help="Overwrite the calibration file if it exists.")
@click.option("--iterations", type=click.IntRange(min=10), default=DEFAULT_ITERATIONS, hidden=True)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def command(output: Path | None, force: bool, iterations: int, quiet: bool) -> None:
    """Run a null loop of tiny torch ops (on the GPU when there is one) without the profiler and under
    it, with tracekit profile's settings, and write the profiler's cost per recorded CPU event and
    runtime call, its launch calls' durations and the unprofiled launch cost to a JSON file.
    """
    from tracekit.output import check_target, write_atomic
    from tracekit.profile.calibrate import calibrate, render_text

    path = (output or Path(DEFAULT_NAME)).expanduser().absolute()
    if path.exists() and not force:
        raise OutputError(f"{path} already exists (use --force to overwrite)")
    check_target(path, force=force)

    def say(message: str) -> None:
        if not quiet:
            click.echo(visible_lines(f"tracekit: calibrating: {message}"), err=True)

    result = calibrate(iterations, say=say)
    written = write_atomic(path, lambda: json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n",
                           force=force)
    if not quiet:
        click.echo(visible_lines(render_text(result, written)))
