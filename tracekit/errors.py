"""One error hierarchy for tracekit, and the one place that maps any exception to (exit code, line)."""

from __future__ import annotations

import os
import signal

# Exit statuses of the CLI.
EXIT_OK = 0
EXIT_ERROR = 2  # bad input, unwritable output, nothing recorded
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
EXIT_SOFTWARE = 70  # a bug in tracekit (sysexits.h EX_SOFTWARE)
_PACKAGE = os.path.dirname(os.path.abspath(__file__))  # this package's directory
DEBUG_ENV = "TRACEKIT_DEBUG"  # set (non-empty): a bug shows its traceback instead of internal_error's line


class TracekitError(Exception):
    """Base of every error tracekit raises on purpose; its message is one line for the user."""

    exit_code = EXIT_ERROR


class TraceFormatError(TracekitError):
    """A trace file (or directory) is missing, unreadable, or not a PyTorch profiler trace."""


class TraceTooLarge(TraceFormatError):
    """A trace inflates past the decompression budget (--max-trace-bytes / TRACEKIT_MAX_TRACE_BYTES)."""


class ProfileError(TracekitError):
    """The profiler could not be set up or the user's program could not be started."""


class CalibrationError(TracekitError):
    """A calibration file (`tracekit calibrate`) is missing, unreadable, or not a valid calibration."""


class OutputError(TracekitError):
    """An output file could not be written (exists without --force, unwritable directory, is the input)."""


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwinds like KeyboardInterrupt so that temp files are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum: int, frame: object) -> None:
    """A signal handler that turns SIGTERM into a Terminated exception in the main thread."""
    raise Terminated(signum)


def exit_status(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, one-line message without prefix) for an exception the CLI reports in one line;
    None for exceptions that are bugs (the CLI lets those show their traceback)."""
    if isinstance(exc, TracekitError):
        return exc.exit_code, f"error: {exc}"
    if isinstance(exc, KeyboardInterrupt) or _caused_by_interrupt(exc):
        return EXIT_SIGINT, "interrupted"
    if isinstance(exc, Terminated):
        return 128 + exc.signum, "terminated"
    if isinstance(exc, MemoryError):
        return EXIT_ERROR, ("error: out of memory (the trace is too large for this machine; "
                            "try --max-trace-bytes or a machine with more memory)")
    if isinstance(exc, RecursionError):
        return EXIT_ERROR, "error: input nested too deeply to process"
    if isinstance(exc, BrokenPipeError):
        return EXIT_ERROR, "error: output closed early (broken pipe)"
    return None


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt raised the exception: Ctrl-C inside a class body's `__set_name__`
    (a dataclass field while a module imports) comes out as a RuntimeError whose cause it is."""
    seen: set[int] = set()
    link = exc.__cause__ or exc.__context__
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def bug_line(exc: BaseException) -> str:
    """`TYPE: MESSAGE at tracekit/PATH:LINE` of an exception that is a bug in tracekit: the message cut
    to 200 characters, the innermost frame in the package."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if name.startswith(_PACKAGE + os.sep):  # the innermost frame in the package
            where = f" at tracekit/{os.path.relpath(name, _PACKAGE).replace(os.sep, '/')}:{tb.tb_lineno}"
        tb = tb.tb_next
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}{where}"


def debugging() -> bool:
    """Whether DEBUG_ENV asks bugs to raise with their traceback (the test suite sets it)."""
    return bool(os.environ.get(DEBUG_ENV))


def internal_error(exc: BaseException, command: str) -> tuple[int, str]:
    """(EXIT_SOFTWARE, one line) for an exception that is a bug in tracekit: its type, its message (cut
    to 200 characters) and the innermost tracekit frame, for a report; DEBUG_ENV shows the traceback."""
    return EXIT_SOFTWARE, (f"internal error in `tracekit {command}`: {bug_line(exc)} "
                           f"(a tracekit bug: please report it with the command and the trace; "
                           f"{DEBUG_ENV}=1 shows the traceback)")
