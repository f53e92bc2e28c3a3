"""`tracekit info TRACE... [--json] [--jobs N]`: a one-screen summary of a trace."""

from __future__ import annotations

import click

from tracekit.cli.common import (
    capture_option,
    check_inputs,
    echo_json,
    echo_warning,
    max_bytes_option,
    quiet_option,
    say,
    scheduler_options,
    worker_options,
)


@click.command("info", short_help="Summarize TRACE: device, counts, GPU busy time, top kernels by name.")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.info/1).")
@click.option("--top", default=10, show_default=True, help="How many top kernels to list.")
@max_bytes_option
@capture_option
@scheduler_options
@quiet_option
def command(traces: tuple[str, ...], as_json: bool, top: int, max_bytes: int | None, captures: tuple[str, ...],
            jobs: int | None, scheduler: str | None, quiet: bool) -> None:
    """Summarize TRACE (a .json/.json.gz file, a directory of per-rank traces, a glob; several may be
    given). Files are read in parallel (--jobs, or a Dask --scheduler)."""
    check_inputs(traces)
    from tracekit.executor import progress_bar, scheduler_from_env
    from tracekit.pipeline.info import summaries
    from tracekit.report.info_text import render_text

    counts = summaries(list(traces), top=top, jobs=jobs, scheduler=scheduler_from_env(scheduler),
                                         max_bytes=max_bytes, captures=captures,
                                         progress=progress_bar(quiet or as_json), **worker_options())
    if not (quiet or as_json):
        for warning in counts.warnings:
            echo_warning(warning)
    if as_json:
        echo_json(counts.to_dict(), allow_nan=True)  # as before: info's counts may hold NaN
    else:
        say(render_text(counts))
