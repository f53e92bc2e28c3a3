"""Helpers shared by the commands: options, the pipeline run with progress, warnings on stderr."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.pipeline import STEADY_STEPS, StepSelection, StepsError
from tracekit.terminal import visible, visible_lines
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


READ_KEY = "tracekit.read"  # ctx.meta: files an option read (a command's outputs may be none of them)


def _calibration(ctx: click.Context, param: click.Parameter, value: str | None) -> ProfilerOverhead | None:
    if value is None:
        return None
    from tracekit.pipeline.calibration import load_calibration

    ctx.meta.setdefault(READ_KEY, []).append(Path(value))
    return load_calibration(value)  # CalibrationError: one line naming the file, exit status of its kind


calibration_option = click.option(
    "--calibration", "overhead", default=None, metavar="FILE", callback=_calibration,
    help="The profiler's cost measured on this machine by `tracekit calibrate` (used where a trace carries "
         "no unprofiled step times of its own; default: docs/model.md's constants).")


def echo_warning(warning: str) -> None:
    """One warning on stderr, its control characters made visible."""
    click.echo(f"tracekit: warning: {visible(warning)}", err=True)


def option_inputs() -> tuple[Path, ...]:
    """The files this command's options read (--calibration FILE): inputs no output may overwrite."""
    return tuple(click.get_current_context().meta.get(READ_KEY, ()))


def echo_json(doc: object, *, allow_nan: bool = False) -> None:
    """Print `doc` as indented JSON (ensure_ascii: no control character survives), piece by piece
    once all of it is encoded (jsonsafe.indented_parts): the printed text is held once, not as
    one string per token."""
    from tracekit.jsonsafe import indented_parts

    for part in indented_parts(doc, allow_nan=allow_nan):
        click.echo(part, nl=False)
    click.echo()


def say(text: object, *, err: bool = False) -> None:
    """Print `text` (stdout, or stderr with err) with every line's control characters made visible
    (terminal.visible_lines): the one way a command writes to the terminal."""
    click.echo(visible_lines(text), err=err)


class PercentType(click.ParamType):
    """A finite, non-negative percentage (a gate's threshold): nan, inf and negative are refused."""

    name = "PCT"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            pct = float(str(value))
        except ValueError:
            pct = math.nan
        if not math.isfinite(pct) or pct < 0:
            self.fail(f"{visible(value)!r} is not a finite percentage >= 0 (e.g. 5)", param, ctx)
        return pct


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


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta[f"tracekit.{param.name}"] = value
    return value


def _wait(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0 < value < 1e6:
        raise click.BadParameter("give a number of seconds above 0")
    return _remember(ctx, param, value)  # type: ignore[return-value]


def worker_options(overhead: ProfilerOverhead | None = None) -> dict[str, Any]:
    """--keep-going and --scheduler-wait of the running command (and `overhead` when given), as
    pipeline keywords."""
    meta = click.get_current_context().meta
    options: dict[str, Any] = {"keep_going": bool(meta.get("tracekit.keep_going")),
                               "scheduler_wait": meta.get("tracekit.scheduler_wait")}
    if overhead is not None:
        options["overhead"] = overhead
    return options


def scheduler_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--jobs N (local worker processes), --scheduler ADDRESS (a Dask cluster), --scheduler-wait S
    and --keep-going (read with worker_options())."""
    fn = click.option("--keep-going", is_flag=True, expose_value=False, callback=_remember,
                      help="When the worker process of a rank dies (a signal, out of memory), skip that rank "
                           "with a warning and report the others (default: stop with one error line).")(fn)
    fn = click.option("--scheduler-wait", type=float, default=None, metavar="SECONDS", expose_value=False,
                      callback=_wait, help="How long to wait for the Dask scheduler's workers "
                                           "(env TRACEKIT_SCHEDULER_WAIT; default 10).")(fn)
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
                     **worker_options(overhead))
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    if not quiet:
        for warning in result.warnings:
            echo_warning(warning)
    return result
