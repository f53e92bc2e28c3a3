"""`tracekit profile`: run a script or module under torch.profiler and write its trace."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.errors import ProfileError

# tracekit's own options that take a value (everything after SCRIPT or -m MODULE is the target's)
_VALUE_OPTIONS = ("-o", "--output", "--warmup", "--active", "--try", "--timeout")


def target_argv(raw: list[str]) -> list[str] | None:
    """The arguments after SCRIPT (or -m MODULE) exactly as given, `--` included: what
    `python SCRIPT ARGS` / `python -m MODULE ARGS` put in sys.argv[1:]. None if there is no target."""
    i = 0
    while i < len(raw):
        arg = raw[i]
        if arg == "-m":
            return raw[i + 2:] if i + 1 < len(raw) else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return raw[i + 1:]  # -mMODULE
        if arg == "--":
            return raw[i + 2:] if i + 1 < len(raw) else None  # tracekit profile [OPTIONS] -- SCRIPT ARGS
        if arg in _VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return raw[i + 1:]
    return None


class ProfileCommand(click.Command):
    """Keeps the raw arguments, so that the target gets its own exactly as python would pass them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tracekit.profile.raw"] = list(args)
        return super().parse_args(ctx, args)


@click.command(
    cls=ProfileCommand,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    short_help="Run a script or module under torch.profiler and write its trace.",
)
@click.option("-m", "module", metavar="MODULE", help="Run library module MODULE, as `python -m`.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trace file to write (default: SCRIPT_STEM.trace.json.gz in the working directory).",
)
@click.option("--force", is_flag=True, help="Overwrite the trace (and report) if they exist.")
@click.option("--with-stack", is_flag=True, help="Record Python call stacks of the ops.")
@click.option("--memory", is_flag=True, help="Record tensor allocations (profile_memory).")
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Steps to run under the profiler before recording starts.",
)
@click.option(
    "--active",
    type=click.IntRange(min=1),
    default=None,
    help="Steps to record after the warm-up (default: all the rest).",
)
@click.option("--no-report", is_flag=True, help="Do not write the HTML report beside the trace.")
@click.option(
    "-q", "--quiet", is_flag=True, help="Print nothing but errors and the script's output."
)
@click.option(
    "--record-command",
    is_flag=True,
    help="Also store the full command line and working directory in the trace (off: traces get shared).",
)
@click.option(
    "--try",
    "try_knobs",
    metavar="KNOB[,KNOB...]",
    default=None,
    help="Run SCRIPT as a baseline and once per knob, each in fresh processes, profiled and timed; "
    "print the table. Knobs: tf32, bf16, dataloader, cudnn_benchmark, compile, cudagraphs.",
)
@click.option(
    "--no-bare",
    is_flag=True,
    help="Do not time the steps without the profiler (by default SCRIPT first runs once unprofiled, "
    "and its step times are stored in the trace).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=None,
    help="Stop a run without the profiler after this many seconds (its step times are then not stored); "
    "with --try, any run (it is marked failed).",
)
@click.argument("target", required=False, metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[--] [ARGS]...")
def command(
    module: str | None,
    output: Path | None,
    force: bool,
    with_stack: bool,
    memory: bool,
    warmup: int,
    active: int | None,
    no_report: bool,
    quiet: bool,
    record_command: bool,
    try_knobs: str | None,
    no_bare: bool,
    timeout: float | None,
    target: str | None,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT (or -m MODULE) as Python would, under torch.profiler, and write its trace.

    Steps (ProfilerStep#N) are marked at each optimizer.step() or tracekit.step() call; --warmup
    and --active pick which of them are recorded. Before the profiled run, SCRIPT runs once in a
    child process without the profiler, and the time of each step goes into the trace (--no-bare
    skips that). The run exits with the script's own status (the profiled run's).
    Everything after SCRIPT (or -m MODULE) goes to it unchanged, a `--` included, as with python.
    """
    from tracekit.profile.runner import Target
    from tracekit.profile.script import profile_target
    from tracekit.profile.session import ProfileOptions

    script_args = list(args)
    if module is None:
        if target is None:
            raise ProfileError("give a SCRIPT to run, or -m MODULE")
    elif target is not None:
        script_args.insert(0, target)
    raw = click.get_current_context().meta.get("tracekit.profile.raw")
    exact = target_argv(raw) if raw is not None else None
    if exact is not None:
        script_args = exact
    if try_knobs is not None:
        from tracekit.cli.try_knobs import run_try

        run_try(Target(script=None if module else target, module=module, args=tuple(script_args)),
                try_knobs, output=output, force=force, warmup=warmup, active=active, timeout=timeout,
                quiet=quiet)
        return
    status = profile_target(
        Target(script=None if module else target, module=module, args=tuple(script_args)),
        ProfileOptions(with_stack=with_stack, memory=memory, warmup=warmup, active=active),
        output=output,
        force=force,
        report=not no_report,
        quiet=quiet,
        command=["tracekit", *sys.argv[1:]],
        record_command=record_command,
        bare=not no_bare,
        timeout=timeout,
    )
    if status:
        raise SystemExit(status)
