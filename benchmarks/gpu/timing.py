"""CUDA-event timing helpers shared by the device measurement scripts (medians of many runs)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

CUDA = torch.cuda.is_available()


class _HostEvent:
    """Stand-in for torch.cuda.Event on a machine without CUDA (CPU smoke tests of these scripts)."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1e3


Event = torch.cuda.Event if CUDA else _HostEvent
DEVICE = "cuda" if CUDA else "cpu"


def synchronize() -> None:
    if CUDA:
        torch.cuda.synchronize()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def bench(fn: Callable[[], object], *, iters: int = 50, warmup: int = 5, rounds: int = 2) -> dict:
    """Time fn() back to back, as a training or decode loop would run it.

    Per iteration: CUDA events recorded before and after fn() on the current stream, no sync in
    between (GPU time of one step, including any gaps while the GPU waits for launches). Per round:
    host wall time of `iters` calls plus the final synchronize, divided by iters. Medians over
    iterations, then the median over rounds; every round is kept so the spread can be judged.
    """
    for _ in range(warmup):
        fn()
    synchronize()
    out = []
    for _ in range(rounds):
        starts = [Event(enable_timing=True) for _ in range(iters)]
        ends = [Event(enable_timing=True) for _ in range(iters)]
        t0 = time.perf_counter()
        for i in range(iters):
            starts[i].record()
            fn()
            ends[i].record()
        synchronize()
        wall = (time.perf_counter() - t0) * 1e3 / iters
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        out.append(
            {
                "event_ms_median": statistics.median(ms),
                "event_ms_p10": _pct(ms, 0.1),
                "event_ms_p90": _pct(ms, 0.9),
                "wall_ms_per_iter": wall,
                "iters": iters,
            }
        )
    return {
        "event_ms_median": statistics.median(r["event_ms_median"] for r in out),
        "wall_ms_per_iter": statistics.median(r["wall_ms_per_iter"] for r in out),
        "rounds": out,
    }


def event_ms(fn: Callable[[], object], *, iters: int = 10, warmup: int = 3) -> float:
    """Median of `iters` event-timed calls, each synchronized (for big kernels: ceilings)."""
    for _ in range(warmup):
        fn()
    synchronize()
    ms = []
    for _ in range(iters):
        s, e = Event(enable_timing=True), Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    return statistics.median(ms)
