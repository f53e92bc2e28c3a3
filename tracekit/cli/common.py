"""Helpers shared by the commands: options, the pipeline run with progress, warnings on stderr."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from tracekit.pipeline import STEADY_STEPS, StepSelection, StepsError
from tracekit.terminal import visible
from tracekit.trace.files import MAX_BYTES_ENV, expand_inputs, parse_size
from tracekit.units import fmt_us  # noqa: F401  (re-exported for the commands)

if TYPE_CHECKING:
    from tracekit.pipeline import RunResult
    from tracekit.pipeline.types import ProfilerOverhead

quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress or warnings on stderr.")


class SizeType(click.ParamType):
    """A byte count: 2G, 500M, 1000000."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError:
            self.fail(f"{visible(value)!r} is not a size (e.g. 2G, 500M, 1000000)", param, ctx)


max_bytes_option = click.option(
    "--max-trace-bytes", "max_bytes", type=SizeType(), default=None,
    help=f"Refuse a trace whose JSON (after gunzip) is larger than SIZE (default: from available memory, "
         f"or ${MAX_BYTES_ENV}).")


capture_option = click.option(
    "--capture", "captures", multiple=True, type=click.Path(), metavar="CAPTURE",
    help="Trace recorded around CUDA-graph capture (file or directory; repeatable): replayed kernels "
         "get the captured ops. A capture_traces/ folder beside TRACE is used without it.")


def _calibration(ctx: click.Context, param: click.Parameter, value: str | None) -> ProfilerOverhead | None:
    if value is None:
        return None
    from tracekit.pipeline.calibration import load_calibration

    return load_calibration(value)  # CalibrationError: one line naming the file, exit status of its kind


calibration_option = click.option(
    "--calibration", "overhead", default=None, metavar="FILE", callback=_calibration,
    help="The profiler's cost measured on this machine by `tracekit calibrate` (used where a trace carries "
         "no unprofiled step times of its own; default: docs/model.md's constants).")


def echo_warning(warning: str) -> None:
    """One warning on stderr, its control characters made visible."""
    click.echo(f"tracekit: warning: {visible(warning)}", err=True)


class StepsType(click.ParamType):
    """A --steps value: steady, all, N or N-M (tracekit.pipeline.StepSelection), parsed here once."""

    name = "STEPS"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> StepSelection:
        if isinstance(value, StepSelection):
            return value
        try:
            return StepSelection.parse(str(value))
        except StepsError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param, param_hint="--steps") from None


steps_option = click.option(
    "--steps", type=StepsType(), default=STEADY_STEPS, show_default=True, metavar="steady|all|N-M",
    help="Steps the headline numbers cover: the steady ones (set-up, warm-up, partial and outlier "
         "steps left out and listed), all of them, or a range of step numbers.",
)


def _jobs(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


def scheduler_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--jobs N (local worker processes) and --scheduler ADDRESS (a Dask cluster)."""
    fn = click.option("--scheduler", default=None, metavar="ADDRESS",
                      help="Run the per-rank work on this Dask scheduler (env TRACEKIT_SCHEDULER); "
                           "needs pip install 'tracekit[dask]'.")(fn)
    return click.option("-j", "--jobs", type=int, default=None, callback=_jobs,
                        help="Worker processes for the ranks (default: the cores; 1: in this process).")(fn)


def check_inputs(traces: tuple[str, ...] | str) -> None:
    """TraceFormatError (one line) for an input that names no trace, before the analysis (and
    pandas) is imported."""
    expand_inputs([traces] if isinstance(traces, str) else [str(t) for t in traces])


def run_for_cli(traces: tuple[str, ...] | str, *, quiet: bool = False, rank: int | None = None,
                jobs: int | None = None, scheduler: str | None = None, view: bool = False,
                tokens_per_step: float | None = None, steps: StepSelection = STEADY_STEPS,
                max_bytes: int | None = None, captures: tuple[str, ...] = (),
                progress_quiet: bool | None = None, overhead: ProfilerOverhead | None = None) -> RunResult:
    """tracekit.pipeline.run over the inputs (files, directories, globs; one worker task per rank
    file), with a rank counter on a terminal, then its warnings; a --steps value that selects no
    step of a rank is a usage error."""
    check_inputs(traces)
    from tracekit.executor import progress_bar, scheduler_from_env
    from tracekit.pipeline import run

    try:
        result = run(traces if isinstance(traces, str) else list(traces), rank=rank, jobs=jobs,
                     scheduler=scheduler_from_env(scheduler), view=view, tokens_per_step=tokens_per_step,
                     steps=steps, max_bytes=max_bytes, captures=captures,
                     progress=progress_bar(quiet if progress_quiet is None else progress_quiet),
                     **({} if overhead is None else {"overhead": overhead}))
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    if not quiet:
        for warning in result.warnings:
            echo_warning(warning)
    return result
