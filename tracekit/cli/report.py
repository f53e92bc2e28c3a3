"""`tracekit report TRACE|DIR`: write one self-contained HTML report of a trace."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from tracekit.cli.common import (
    capture_option,
    load_for_cli,
    max_bytes_option,
    quiet_option,
    steps_option,
)
from tracekit.terminal import visible


@click.command("report")
@click.argument("trace", type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),  # checked by report.write.check_target: one line, before loading
    help="HTML file to write (default: TRACE_STEM.report.html beside the trace).",
)
@click.option("--open", "open_", is_flag=True, help="Open the report in a web browser.")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
@click.option("--rank", type=int, default=None, help="Report only this rank of a multi-rank trace.")
@steps_option
@max_bytes_option
@capture_option
@quiet_option
def command(trace: str, output: Path | None, open_: bool, force: bool, rank: int | None, steps: str,
            max_bytes: int | None, captures: tuple[str, ...],
            quiet: bool) -> None:
    """Write an HTML report of TRACE (a .json/.json.gz file or a directory of per-rank traces).

    The report is one file with everything inlined: it opens offline from disk. An existing file
    is replaced only with --force; otherwise the report is written beside it under a free name.
    """
    from tracekit.analyzers.steady import StepsError
    from tracekit.report import build_view, default_output, write_view
    from tracekit.report.write import check_target
    from tracekit.trace.files import trace_files

    inputs = trace_files(trace)
    wanted = output if output is not None else default_output(trace)
    check_target(wanted, inputs=inputs, force=force)  # before the long work
    loaded = load_for_cli(trace, quiet=quiet, max_bytes=max_bytes, captures=captures)
    try:
        view = build_view(loaded, rank=rank, steps=steps)
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    written = write_view(view, wanted, force=force, inputs=inputs)
    if written != wanted:
        click.echo(f"tracekit: {visible(wanted)} exists; wrote {visible(written)} instead (--force replaces it)",
                   err=True)
    if not quiet:
        size = written.stat().st_size
        head = view.ranks[0] if view.ranks else None
        verdict = f" · {head.verdict_label}" if head and head.verdict_label else ""
        top = f" · biggest win: {head.top_change.title} (~{head.top_change.saving})" if head and head.top_change else ""
        click.echo(visible(f"wrote {written} ({size / 1e3:,.0f} kB){verdict}{top}"))
    if open_:
        webbrowser.open(written.resolve().as_uri())
