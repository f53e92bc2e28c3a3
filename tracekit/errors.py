"""One error hierarchy for tracekit; the CLI maps each class to an exit code in one place."""

from __future__ import annotations


class TracekitError(Exception):
    """Base of every error tracekit raises on purpose; its message is one line for the user."""

    exit_code = 2


class TraceFormatError(TracekitError):
    """A trace file (or directory) is missing, unreadable, or not a PyTorch profiler trace."""


class ProfileError(TracekitError):
    """The profiler could not be set up or the user's program could not be started."""


class OutputError(TracekitError):
    """An output file could not be written (exists without --force, unwritable directory)."""
