"""`tracekit diff BEFORE AFTER`: what changed between two runs, per steady step, and did the predictions come true."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli.common import (
    PercentType,
    echo_json,
    echo_warning,
    quiet_option,
    say,
    steps_option,
)
from tracekit.terminal import visible

if TYPE_CHECKING:
    from tracekit.pipeline import StepSelection


@click.command("diff")
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.diff/2).")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff as one offline HTML page.")
@click.option("--force", is_flag=True, help="Overwrite the --html file if it exists.")
@click.option("--fail-if-slower", "fail_pct", type=PercentType(), default=None, metavar="PCT",
              help="Exit 1 when the steady step (unprofiled: measured, else projected, else as traced) "
                   "got slower by more than PCT percent.")
@click.option("--rank", type=int, default=None, help="Compare only this rank (default: all ranks).")
@click.option("--top", default=10, show_default=True, help="How many rows per table in the text.")
@steps_option
@quiet_option
def command(before: str, after: str, as_json: bool, html: Path | None, force: bool, fail_pct: float | None,
            rank: int | None, top: int, steps: StepSelection, quiet: bool) -> None:
    """Compare two traces (files or rank directories) over their steady steps, judged on the step without
    the profiler; check BEFORE's suggestions where AFTER shows their change."""
    from tracekit.output import check_target
    from tracekit.pipeline.compare import compare_files, diff_inputs
    from tracekit.pipeline.types import StepsError
    from tracekit.report.diff_text import render_text, slower_message

    inputs = diff_inputs(before, after)  # every file read, collected before anything is written
    if html is not None:
        check_target(html, inputs=inputs, force=force, option="--html")  # one line, before the long work
    try:
        result = compare_files(before, after, rank=rank, steps=steps, show_load=not (quiet or as_json),
                               warn=None if quiet or as_json else echo_warning)
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    if html is not None:
        from tracekit.report.diff_view import write_diff_html

        written = write_diff_html(result, html, force=force, inputs=inputs)
        if written != html:
            say(f"tracekit: {visible(html)} exists; wrote {visible(written)} instead (--force replaces it)", err=True)
        if not quiet:
            say(f"tracekit: diff page written to {visible(written)}", err=True)
    if as_json:
        echo_json(result.to_dict())
    else:
        say(render_text(result, top=top))
    if fail_pct is not None:
        message = slower_message(result, fail_pct)
        if message is not None:
            say(f"tracekit: {message}", err=True)
            raise SystemExit(1)
