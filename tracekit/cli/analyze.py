"""`tracekit analyze TRACE... [--json] [--rank N] [--jobs N] [--scheduler ADDR]`: the analysis, as text or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tracekit.cli.common import (
    calibration_option,
    capture_option,
    echo_json,
    max_bytes_option,
    quiet_option,
    run_for_cli,
    say,
    scheduler_options,
    steps_option,
)

if TYPE_CHECKING:
    from tracekit.pipeline import StepSelection
    from tracekit.pipeline.types import ProfilerOverhead


@click.command("analyze", short_help="Print what bounds TRACE (verdict, time by class, top kernels) and what to change.")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (schema tracekit.analysis/2).")
@click.option("--rank", type=int, default=None, help="Analyze only this rank (default: all ranks).")
@click.option("--tokens-per-step", type=float, default=None,
              help="Tokens generated per profiler step (decode), to report kernels per token.")
@click.option("--top", default=15, show_default=True, help="How many kernel rows to list.")
@click.option("--by", "by", type=click.Choice(["op", "module", "line"]), default=None,
              help="Print time by aten op, nn.Module or source line (self/total CPU, GPU time launched, launches, "
              "FLOPs) instead of the kernel view; module and line need a trace recorded with stacks.")
@steps_option
@max_bytes_option
@capture_option
@calibration_option
@scheduler_options
@quiet_option
def command(traces: tuple[str, ...], as_json: bool, rank: int | None, tokens_per_step: float | None, top: int,
            by: str | None, steps: StepSelection, max_bytes: int | None, captures: tuple[str, ...],
            overhead: ProfilerOverhead | None, jobs: int | None,
            scheduler: str | None, quiet: bool) -> None:
    """Classify kernels, measure launch overhead vs GPU time, place kernels on the roofline.

    TRACE is a trace file, a directory of per-rank traces, or a glob ('run/*.json.gz'); several may
    be given. Ranks are analysed in parallel (--jobs) and compared: who holds the job back, and why.
    """
    result = run_for_cli(traces, quiet=quiet, rank=rank, jobs=jobs, scheduler=scheduler,
                         tokens_per_step=tokens_per_step, steps=steps, max_bytes=max_bytes, captures=captures,
                         progress_quiet=quiet or as_json, overhead=overhead)
    if as_json:
        doc = result.to_dict()
        if by is not None:  # only that grouping
            for entry in doc.get("operators", []):
                entry["groupings"] = [g for g in entry["groupings"] if g["by"] == by]
        echo_json(doc)
    elif by is not None:
        from tracekit.report.operators_view import operator_lines
        from tracekit.report.text import safe

        summary = result.summary
        click.echo("\n".join([f"trace     {safe(result.path)}",
                              *operator_lines(summary.views, by, top=max(top, 25),
                                              steps={r.rank: r.totals.steps for r in summary.ranks})]))
    else:
        from tracekit.report.text import render_text

        say(render_text(result.summary, result.suggestions, result.cross, path=result.path, top=top))
