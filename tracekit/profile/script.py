"""`tracekit profile SCRIPT|-m MODULE`: run the target under the profiler and write its trace."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tracekit.errors import OutputError
from tracekit.profile.export import report_path_for
from tracekit.profile.record import (
    default_output,
    finish,
    nothing_recorded,
    per_rank_path,
    plan_outputs,
    provenance,
)
from tracekit.profile.runner import Target, exit_status, report_exception
from tracekit.profile.session import ProfileOptions, Session, require_torch
from tracekit.terminal import visible
from tracekit.units import plural

# Exit status when tracekit itself could not do its job (as for TracekitError in the CLI).
TRACEKIT_FAILURE = 2


def profile_target(
    target: Target,
    options: ProfileOptions,
    *,
    output: Path | None = None,
    force: bool = False,
    report: bool = True,
    quiet: bool = False,
    command: Sequence[str] = (),
    record_command: bool = False,
    bare: bool = False,
    timeout: float | None = None,
) -> int:
    """Profile `target`; return the status to exit with (the script's own, or 2 if nothing recorded).

    With `bare`, the target first runs once without the profiler in a child process (stopped after
    `timeout` seconds), and its step times go into the trace's "tracekit" object as "bare"
    (tracekit.profile.bare); when that run fails, the profile goes on without them.
    Raises ProfileError/OutputError (one line) before anything runs when torch is missing, the target
    is not runnable Python, or an output file exists without `force`.
    """
    require_torch()
    target.check()
    trace_path = per_rank_path(
        Path(output).expanduser().absolute()
        if output
        else default_output(target.name, unique=False)
    )
    if target.script is not None:
        from tracekit.output import is_input

        script = Path(target.script)
        for out in (trace_path, report_path_for(trace_path) if report else None):
            if out is not None and is_input(out, [script]) is not None:
                raise OutputError(f"{out}: is the script being profiled; choose another output with -o")
    report_path = plan_outputs(trace_path, force=force, report=report)

    def say(message: str) -> None:
        if not quiet:
            _tell(f"tracekit: {visible(message)}")

    timing = _time_bare(target, timeout, say) if bare else None
    session = Session(options)
    session.start()
    if not session.cuda:
        say("CUDA is not available: recording CPU activity only")
    status = run_target(target, session)
    meta = provenance(
        session,
        mode="module" if target.module is not None else "script",
        target=target.display,
        command=command,
        exit_status=status,
        record_command=record_command,
    )
    bare_note = _store_bare(meta, timing, session) if timing is not None else None
    result = finish(session, trace_path, meta, report_path=report_path, force=force)
    if result is None:
        _tell(f"tracekit: error: {visible(nothing_recorded(session))}")
        return status or TRACEKIT_FAILURE
    steps = plural(result.steps, "step") if result.steps else "no steps marked"
    launches = f", {plural(result.triton_launches, 'Triton launch', 'Triton launches')}" if result.triton_launches else ""
    say(f"trace written to {_shown(result.trace_path)} ({steps}{launches})")
    if bare_note is not None:
        say(bare_note)
    if result.report_path is not None:
        say(f"report written to {_shown(result.report_path)}")
    if result.report_note is not None:
        say(result.report_note)
    if result.report_error is not None:
        _tell(f"tracekit: error: {visible(result.report_error)}")
        return status or TRACEKIT_FAILURE
    if result.verdict:
        say(result.verdict)  # last: what bounds the step, and the biggest win
    return status


def _time_bare(target: Target, timeout: float | None, say: Callable[[str], None]) -> dict[str, Any] | None:
    """The target's unprofiled timed run (tracekit.profile.bare), or None after one line saying why not."""
    from tracekit.profile.bare import launcher_world_size, time_steps

    world = launcher_world_size()
    if world > 1:  # the ranks' unprofiled runs would meet in the launcher's process group
        say(f"not timing the steps without the profiler under a multi-process launcher (WORLD_SIZE={world})")
        return None
    say("timing the steps without the profiler (pass --no-bare to skip)")
    timing = time_steps(target, timeout=timeout)
    if isinstance(timing, str):
        say(f"unprofiled step times not stored: the run without the profiler failed: {timing}")
        return None
    return timing


def _store_bare(meta: dict[str, Any], timing: dict[str, Any], session: Session) -> str:
    """Put the "bare" object of `timing` into `meta`; the line that says what was stored (or why not)."""
    from tracekit.profile.bare import KEY, bare_object

    bare = bare_object(timing, session.recorded_steps())
    if bare is None:
        why = "the run marked no steps" if not session.marks else "none of the recorded steps was timed"
        return f"unprofiled step times not stored: {why}"
    meta[KEY] = bare
    marked = bare["steps_marked"]
    differ = (f"; note: the run without the profiler marked {plural(marked, 'step')}, the profiled run "
              f"{session.marks}") if marked != session.marks else ""
    return (f"unprofiled times of {plural(len(bare['step_us']), 'step')} stored in the trace "
            f"({bare['clock']} clock{differ})")


def run_target(target: Target, session: Session) -> int:
    """Run the target in the started `session`, stop it, show the script's error; return its status.

    A child the script forked (os.fork) that runs to the end of the script leaves here with its
    own status (os._exit after flushing its output): the profiler and the trace belong to the
    process that started the run, and their teardown in a forked copy would deadlock."""
    owner = os.getpid()
    error: BaseException | None = None
    try:
        with _sigterm_as_exit():
            target.run()
    except BaseException as exc:  # the script's own exit: reported below as Python would
        error = exc
    finally:
        if os.getpid() != owner:
            _leave_forked_child(error)
        session.stop()
    status = exit_status(error)
    if error is not None:
        with contextlib.suppress(OSError, ValueError):  # the script may have closed fd 2
            report_exception(error)
        del error  # drop the script's frames before exporting
    return status


def _leave_forked_child(error: BaseException | None) -> NoReturn:
    """End a forked child of the script as its own interpreter would end (its error shown, its
    output flushed, its status), without tracekit's epilogue."""
    status = exit_status(error)
    with contextlib.suppress(Exception):
        if error is not None:
            report_exception(error)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _tell(line: str) -> None:
    """One line on stderr; silent when the script closed or broke fd 2 (its status still counts)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While the script runs, SIGTERM (a timeout, a job scheduler) ends it like sys.exit(143), so
    the trace of what ran is still written. A handler the script installs itself wins."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, previous)


def _shown(path: Path) -> str:
    """A path relative to the working directory when it lies below it, else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel
