"""The `tracekit` command: entry points and the one place that turns exceptions into exit codes.

This module imports nothing heavy (not even click) so that Ctrl-C or SIGTERM at start-up already
ends in one line; the click group lives in tracekit.cli.group and each command in its own module."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from tracekit.errors import DEBUG_ENV, Terminated, exit_status, internal_error, raise_terminated

# command name -> module under tracekit.cli holding a click command named `command`
COMMANDS: dict[str, str] = {
    "info": "info",
    "analyze": "analyze",
    "report": "report",
    "profile": "profile",
    "diff": "diff",
    "export": "export",
    "calibrate": "calibrate",
}
# commands that run tracekit's own code only (not a user's script, not torch): once one has finished,
# leave() skips the interpreter's teardown, ~0.1 s of freeing every module and object on the way out
NO_TEARDOWN = frozenset({"info", "analyze", "report", "diff", "export"})
_command: str | None = None  # the command main() last ran
# what `tracekit --help` lists (kept here so that --help imports no command module)
SHORT_HELP: dict[str, str] = {
    "info": "Summarize TRACE: device, counts, GPU busy time, top kernels by name.",
    "analyze": "Print what bounds TRACE (verdict, time by class, top kernels) and what to change.",
    "report": "Write one self-contained HTML report of TRACE.",
    "export": "Write TRACE with tracekit's results added, for Perfetto.",
    "diff": "Compare two traces over their steady steps; check BEFORE's predicted savings.",
    "profile": "Run a script or module under torch.profiler and write its trace.",
    "calibrate": "Measure what torch.profiler costs per recorded event on this machine; write it as JSON.",
}


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """While the CLI runs, SIGTERM and SIGHUP raise errors.Terminated (like Ctrl-C raises
    KeyboardInterrupt), so that every `finally` removes its temp files before exit 143/129."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from tracekit._startup import restore

    restore()  # Ctrl-C raises KeyboardInterrupt again: main() turns it into one line
    previous = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            previous[sig] = signal.signal(sig, raise_terminated)
    hook = sys.unraisablehook
    sys.unraisablehook = _redeliver(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _redeliver(hook: Callable[[sys.UnraisableHookArgs], object]) -> Callable[[sys.UnraisableHookArgs], object]:
    """An unraisablehook for the CLI's run: Ctrl-C or SIGTERM that landed in code Python cannot
    raise from (a weakref callback during an import, a __del__) would be printed as "Exception
    ignored" and lost, the command going on; the signal is sent again instead, a moment later (from
    a thread: sent from here, it would be raised inside this hook), to reach the command's own code."""
    def unraisable(info: sys.UnraisableHookArgs) -> object:
        exc = info.exc_value
        signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else \
            exc.signum if isinstance(exc, Terminated) else None
        if signum is None:
            return hook(info)
        while True:
            try:
                _send_later(signum)
                return None
            except (KeyboardInterrupt, Terminated):  # an earlier one arrived here: it is sent again too
                continue
    return unraisable


def _send_later(signum: int) -> None:
    def send() -> None:
        time.sleep(0.02)
        os.kill(os.getpid(), signum)

    try:
        threading.Thread(target=send, name="tracekit-resend-signal", daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: no new threads
        os.kill(os.getpid(), signum)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; any error tracekit expects (bad input, unwritable output, interruption, out of
    memory) ends as one escaped line on stderr and its exit code (errors.exit_status)."""
    from tracekit.terminal import visible

    with terminate_as_exception():
        try:
            return _run(sys.argv[1:] if argv is None else list(argv))
        except BaseException as exc:
            status = exit_status(exc)
            if status is None and isinstance(exc, Exception) and not os.environ.get(DEBUG_ENV):
                args = sys.argv[1:] if argv is None else list(argv)
                status = internal_error(exc, next((a for a in args if not a.startswith("-")), ""))
            if status is None:
                raise
            code, message = status
            if isinstance(exc, BrokenPipeError):
                _quiet_stdout()
            _say(f"tracekit: {visible(message)}")
            return code


def _run(args: list[str]) -> int:
    if args == ["--version"]:  # answered without importing click (the same text click prints)
        from tracekit._version import __version__

        sys.stdout.write(f"tracekit, version {__version__}\n")
        return 0
    import click

    from tracekit.cli.group import cli

    global _command
    _command = next((a for a in args if not a.startswith("-")), None)  # the group takes no option value

    try:
        with cli.make_context("tracekit", args) as ctx:
            rv = cli.invoke(ctx)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.BadParameter as exc:  # a bad option value: one line, what was typed escaped
        from tracekit.terminal import visible

        sys.stderr.write(f"tracekit: error: {visible(exc.format_message())}\n")
        return 2
    except click.ClickException as exc:  # usage errors echo what was typed: escape it too
        import io

        from tracekit.terminal import visible

        shown = io.StringIO()
        exc.show(file=shown)
        sys.stderr.write("".join(visible(line) + "\n" for line in shown.getvalue().splitlines()))
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    return rv if isinstance(rv, int) else 0


def _quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so that the exit flush stays silent."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def leave(code: int) -> None:
    """Exit with `code`. After Ctrl-C (130) without the interpreter's finalization, once stdout and
    stderr are flushed: a library interrupted mid-import (torch) can otherwise turn the exit into
    death by SIGINT at shutdown; every temp file is already gone by then."""
    from tracekit._startup import at_exit

    if code == 128 + signal.SIGINT:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    at_exit()  # Ctrl-C in the interpreter's shutdown: one line, 130
    if _command in NO_TEARDOWN:
        _exit_without_teardown(code)
    sys.exit(code)


def _exit_without_teardown(code: int) -> None:
    """os._exit(code) after what the interpreter's shutdown does that anyone sees: the atexit
    handlers, then flushing stdout and stderr. Returns (the usual shutdown follows) while a thread
    that is not a daemon still runs, or when a flush fails (its error and status are Python's)."""
    import atexit

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()  # (they run once: the list is emptied)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:
        return
    os._exit(code)


def run() -> None:
    """Console-script entry point."""
    leave(main())
