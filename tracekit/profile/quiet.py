"""Hide the lines torch's profiler prints from C++ (`USDT: ... profiler_start`) while it starts, steps and stops."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO

# the profiler's own progress lines: "USDT:2026-12-01 15:02:37 11650:11650 SyncActivityProfilerHandler.cpp:52]
# profiler_start" (torch 2.10+) and "STAGE:2024-01-01 ... ActivityProfilerController.cpp:314] Completed Stage: ..."
NOISE = re.compile(r"^(USDT|STAGE):\S+ \S+ \d+:\d+ \w+\.cpp:\d+\]")


class NativeNoise:
    """While `hidden()` is active, file descriptors 1 and 2 write to a temporary file; `release()`
    prints what was written there to stderr, less the profiler's own lines (NOISE)."""

    def __init__(self) -> None:
        self._tmp: IO[bytes] | None = None

    def _redirect(self) -> list[tuple[int, int]] | None:
        try:
            for fd in (1, 2):  # a script may have closed one: a new descriptor would land on it
                os.fstat(fd)
            if self._tmp is None:
                self._tmp = tempfile.TemporaryFile()  # noqa: SIM115 - open across calls, closed by release()
            sys.stdout.flush()
            sys.stderr.flush()
            saved = [(fd, os.dup(fd)) for fd in (1, 2)]
        except (OSError, ValueError, AttributeError):  # no real descriptors (a notebook, closed streams)
            return None
        for fd, _ in saved:
            os.dup2(self._tmp.fileno(), fd)
        return saved

    @contextmanager
    def hidden(self) -> Iterator[None]:
        saved = self._redirect()
        try:
            yield
        finally:
            if saved is not None:
                for stream in (sys.stdout, sys.stderr):
                    with suppress(OSError, ValueError, AttributeError):
                        stream.flush()
                for fd, copy in saved:
                    os.dup2(copy, fd)
                    os.close(copy)

    def release(self) -> None:
        """Print the captured lines that are not the profiler's own, then drop the file."""
        if self._tmp is None:
            return
        tmp, self._tmp = self._tmp, None
        try:
            tmp.seek(0)
            kept = [line for line in tmp.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not NOISE.match(line)]
        finally:
            tmp.close()
        if kept:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
