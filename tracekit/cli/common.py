"""Helpers shared by the commands: loading a trace with progress, formatting times."""

from __future__ import annotations

import re

import click

from tracekit.units import fmt_us  # noqa: F401  (re-exported for the commands)

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress or warnings on stderr.")


def _jobs(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


def scheduler_options(fn):
    """--jobs N (local worker processes) and --scheduler ADDRESS (a Dask cluster)."""
    fn = click.option("--scheduler", default=None, metavar="ADDRESS",
                      help="Run the per-rank work on this Dask scheduler (env TRACEKIT_SCHEDULER); "
                           "needs pip install 'tracekit[dask]'.")(fn)
    return click.option("-j", "--jobs", type=int, default=None, callback=_jobs,
                        help="Worker processes for the ranks (default: the cores; 1: in this process).")(fn)


def run_for_cli(traces: tuple[str, ...] | str, *, quiet: bool = False, rank: int | None = None,
                jobs: int | None = None, scheduler: str | None = None, view: bool = False,
                tokens_per_step: float | None = None, steps: str = "steady",
                progress_quiet: bool | None = None):
    """tracekit.pipeline.run over the inputs, with a rank counter on a terminal, then its warnings;
    a bad --steps value is a usage error."""
    from tracekit.analyzers.steady import StepsError
    from tracekit.executor import progress_bar, scheduler_from_env
    from tracekit.pipeline import run

    try:
        result = run(traces if isinstance(traces, str) else list(traces), rank=rank, jobs=jobs,
                     scheduler=scheduler_from_env(scheduler), view=view, tokens_per_step=tokens_per_step,
                     steps=steps, progress=progress_bar(quiet if progress_quiet is None else progress_quiet))
    except StepsError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    if not quiet:
        for warning in result.warnings:
            click.echo(f"tracekit: warning: {_CONTROL.sub('?', str(warning))}", err=True)
    return result


steps_option = click.option(
    "--steps", default="steady", show_default=True, metavar="steady|all|N-M",
    help="Steps the headline numbers cover: the steady ones (set-up, warm-up, partial and outlier "
         "steps left out and listed), all of them, or a range of step numbers.",
)
