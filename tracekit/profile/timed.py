"""A session without a profiler: the same step marks as a profiled run, timed by wall clock and CUDA events.

`TimedSession` inherits `Session`'s step logic (optimizer-step marks, `tracekit.step()` taking over,
the primary optimizer only), so step N here is the step that is `ProfilerStep#N` in a profiled run of
the same script. At every boundary it stores `time.perf_counter_ns()` and, with CUDA, records a CUDA
event on the current stream: no synchronisation while the script runs, so the script's own CPU/GPU
overlap is untouched. `stop()` synchronises once and reads the events: an event's time is when the
GPU reached that point of the stream, so event-to-event intervals are the steps as the GPU ran them
(its own work, or its idle time waiting for the CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tracekit.errors import ProfileError
from tracekit.profile import steps
from tracekit.profile.optim_steps import OptimizerSteps
from tracekit.profile.session import ProfileOptions, Session, require_torch


@dataclass(frozen=True)
class StepClock:
    """Boundaries of steps 0..N: `wall_us[k]` / `gpu_us[k]` is where step k starts; the last entry is the end.

    Times are µs from the first boundary. `gpu_us` is empty without CUDA (or when the events could not
    be read, e.g. after a CUDA error).
    """

    wall_us: tuple[float, ...]
    gpu_us: tuple[float, ...]

    def durations(self, clock: str) -> list[float]:
        """Per-step durations (µs) on 'wall' or 'gpu' (step k = boundary k to k+1)."""
        b = self.gpu_us if clock == "gpu" else self.wall_us
        return [b[k + 1] - b[k] for k in range(len(b) - 1)]

    def to_dict(self) -> dict[str, Any]:
        return {"wall_us": list(self.wall_us), "gpu_us": list(self.gpu_us)}


class TimedSession(Session):
    """Step marks and per-step timestamps, no torch.profiler."""

    def __init__(self) -> None:
        super().__init__(ProfileOptions(), triton=False)
        self._torch: Any = None
        self._wall: list[int] = []
        self._events: list[Any] = []
        self.clock: StepClock | None = None

    def start(self) -> None:
        torch = require_torch()
        if steps.active() is not None:
            raise ProfileError("a tracekit profile is already running in this process")
        self._torch = torch
        self.cuda = bool(torch.cuda.is_available())
        steps.set_active(self)
        self._optimizer_hook = OptimizerSteps(self._on_optimizer_step)
        self._optimizer_hook.install()
        self._running = True
        self._boundary()

    def advance(self) -> None:
        if self._running:
            self.marks += 1
            self._boundary()

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        try:
            self._boundary()
            gpu: list[float] = []
            if self.cuda and self._events:
                try:
                    self._torch.cuda.synchronize()
                    first = self._events[0]
                    gpu = [1000.0 * first.elapsed_time(e) for e in self._events]
                except Exception:  # a CUDA error in the script: keep the wall clock only
                    gpu = []
            t0 = self._wall[0]
            self.clock = StepClock(tuple((t - t0) / 1000.0 for t in self._wall), tuple(gpu))
        finally:
            self._cleanup()

    def _boundary(self) -> None:
        self._wall.append(time.perf_counter_ns())
        if self.cuda:
            try:
                event = self._torch.cuda.Event(enable_timing=True)
                event.record()
                self._events.append(event)
            except Exception:
                self.cuda = False
                self._events.clear()
