"""`tracekit report TRACE|DIR`: write one self-contained HTML report of a trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli.common import (
    calibration_option,
    capture_option,
    check_inputs,
    echo_warning,
    max_bytes_option,
    option_inputs,
    quiet_option,
    say,
    scheduler_options,
    steps_option,
    worker_options,
)
from tracekit.terminal import visible

if TYPE_CHECKING:
    from tracekit.pipeline import StepSelection
    from tracekit.pipeline.types import ProfilerOverhead


@click.command("report", short_help="Write one self-contained HTML report of TRACE.")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),  # checked by output.check_target: one line, before loading
    help="HTML file to write (default: TRACE_STEM.report.html beside the trace).",
)
@click.option("--open", "open_", is_flag=True, help="Open the report in a web browser.")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@click.option("--rank", type=int, default=None, help="Report only this rank of a multi-rank trace.")
@steps_option
@max_bytes_option
@capture_option
@calibration_option
@scheduler_options
@quiet_option
def command(traces: tuple[str, ...], output: Path | None, open_: bool, force: bool, rank: int | None,
            steps: StepSelection, max_bytes: int | None, captures: tuple[str, ...],
            overhead: ProfilerOverhead | None, jobs: int | None,
            scheduler: str | None, quiet: bool) -> None:
    """Write an HTML report of TRACE (a .json/.json.gz file, a directory of per-rank traces, a glob;
    several may be given). Ranks are analysed in parallel; a multi-rank report opens with the
    cross-rank view (which rank holds the job back, and why).

    The report is one file with everything inlined: it opens offline from disk. An existing file
    is replaced only with --force; otherwise the report is written beside it under a free name.
    """
    check_inputs(traces)
    from tracekit.executor import progress_bar, scheduler_from_env
    from tracekit.pipeline.reports import produce_report
    from tracekit.pipeline.types import StepsError

    try:
        report = produce_report(list(traces), output, force=force, rank=rank, jobs=jobs, also_read=option_inputs(),
                                scheduler=scheduler_from_env(scheduler), steps=steps, max_bytes=max_bytes,
                                captures=captures, progress=progress_bar(quiet),
                                **worker_options(overhead))
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    result, view, written, wanted = report.result, report.view, report.path, report.wanted
    if not quiet:
        for warning in result.warnings:
            echo_warning(warning)
    if written != wanted:
        say(f"tracekit: {visible(wanted)} exists; wrote {visible(written)} instead (--force replaces it)", err=True)
    if not quiet:
        head = view.ranks[0] if view.ranks else None
        label = head.verdict_label if head else ""
        change = f"{head.top_change.title} (~{head.top_change.saving})" if head and head.top_change else ""
        if result.multi:  # the job's verdict and biggest win, over every rank and the cross-rank rules
            from tracekit.report.headline import job_headline

            label, change = job_headline(result.summary, result.suggestions)
        late = result.cross.stragglers if result.cross is not None else ()
        verdict = f" · {label}" if label else ""
        straggler = f" · straggler: rank {late[0].rank}" if late else ""
        top = f" · biggest win: {change}" if change else ""
        kb = f" ({written.stat().st_size / 1e3:,.0f} kB)" if written.is_file() else ""  # not /dev/null
        say(f"wrote {visible(written)}{kb}{verdict}{straggler}{top}")
    if open_:
        import webbrowser  # only for --open (its import pulls in subprocess)

        webbrowser.open(written.resolve().as_uri())
