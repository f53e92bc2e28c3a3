"""Step marks: `tracekit.step()` and `tracekit.step_range()` let any script mark ProfilerStep boundaries."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol


class StepMarker(Protocol):
    """What a running profile session offers to the step functions."""

    def mark_step(self, *, explicit: bool) -> None: ...


_active: list[StepMarker] = []


def set_active(session: StepMarker | None) -> None:
    """Make `session` the one `step()` talks to (None: no session running)."""
    _active.clear()
    if session is not None:
        _active.append(session)


def active() -> StepMarker | None:
    """The running session, if any."""
    return _active[0] if _active else None


def step() -> None:
    """Mark the end of one step (a training iteration, a decoded token...). A no-op when not profiling.

    Once a script calls this, the automatic optimizer-step marks are switched off for the run, so
    scripts that mark steps themselves are never double-counted.
    """
    if _active:
        _active[0].mark_step(explicit=True)


@contextlib.contextmanager
def step_range() -> Iterator[None]:
    """`with tracekit.step_range(): ...` around one iteration: marks a step boundary when it ends."""
    try:
        yield
    finally:
        step()
