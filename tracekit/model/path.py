"""The critical path of a replayed step, walked back from its end: time segments labelled by what the step waited for."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.model.chains import PATH_CPU, PATH_GPU
from tracekit.model.graph import StepGraph

# Segment kinds by PATH_* label (model/chains.py): host work between runtime calls; launch and other
# runtime calls and the latency from a launch to its GPU start; the own part of blocking calls; GPU work.
PATH_KINDS = ("cpu", "launch", "sync", "gpu")

Segment = tuple[float, float, int]  # (start µs, end µs, PATH_* label)


@dataclass(frozen=True)
class StepEnd:
    """Where a replayed step ends, and the point the critical path's last segment leads to."""

    cpu_end_us: float  # the main thread's end (NaN: GPU-side window)
    gpu_end_us: float  # the end of the step's GPU work (the window start when it has none)
    span_end_us: float  # max(CPU end, GPU end, window start)
    last: tuple[float, int, int] | None  # (time, point, label of the last segment); None: no work


def step_end(graph: StepGraph, call_end: np.ndarray, g_end: np.ndarray, tail_us: float, origin_pt: int) -> StepEnd:
    """The step's end from its replayed call and GPU ends (model/replay.py's span definition)."""
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    w0 = graph.window_start_us
    gpu_end = float(g_end.max()) if n_gpu else w0
    candidates: list[tuple[float, int, int]] = []
    cpu_end = float("nan")
    if graph.gpu_side:
        span_end = max(gpu_end, w0)
    else:
        last = graph.main_last_call
        cpu_from, from_pt = (float(call_end[last]), n_calls + last) if last >= 0 else (graph.origin_us, origin_pt)
        cpu_end = cpu_from + tail_us
        candidates.append((cpu_end, from_pt, PATH_CPU))
        span_end = max(cpu_end, gpu_end, w0)
    if n_gpu:
        j = int(np.argmax(g_end))
        candidates.append((gpu_end, 2 * n_calls + n_gpu + j, PATH_GPU))
    return StepEnd(cpu_end_us=cpu_end, gpu_end_us=gpu_end, span_end_us=span_end,
                   last=max(candidates) if candidates else None)


def walk(graph: StepGraph, times: list[float], pred: list[int], label: list[int], blocked: list[float],
         end: StepEnd, origin_pt: int, segments: list[Segment] | None = None) -> tuple[list[float], float]:
    """(time per PATH_* label, sync wait) of the critical path, walked from the step's end back along
    each point's predecessor to the window start; each stretch appended to `segments` (latest first)
    when given. A stretch runs from its predecessor's time (never before the window start, never
    after the stretch that follows it) to its point's time, labelled with the point's label; the
    stretches tile [window start, span end]. The sync wait is the time the CPU sat blocked in the
    waiting calls on the path (`blocked`, per call)."""
    w0 = graph.window_start_us
    n_calls = graph.n_calls
    parts = [0.0, 0.0, 0.0, 0.0]
    keep = segments is not None
    out: list[Segment] = segments if segments is not None else []
    sync_wait = 0.0
    best = end.last
    if best is None or best[0] < w0:
        if end.span_end_us > w0:  # the window opens on earlier steps' GPU work
            parts[PATH_GPU] += end.span_end_us - w0
            if keep:
                out.append((w0, end.span_end_us, PATH_GPU))
        return parts, sync_wait
    top, pt, seg = best
    t_here = times[pt]
    lo = t_here if t_here > w0 else w0
    if top > lo:
        parts[seg] += top - lo
        if keep:
            out.append((lo, top, seg))
    cursor = min(lo, top)
    first_end, last_end = n_calls, 2 * n_calls
    while pt != origin_pt and t_here > w0:
        p = pred[pt]
        t_before = times[p]
        lo = t_before if t_before > w0 else w0
        if cursor > lo:
            kind = label[pt]
            parts[kind] += cursor - lo
            if keep:
                out.append((lo, cursor, kind))
            cursor = lo
        if first_end <= pt < last_end:
            sync_wait += blocked[pt - n_calls]
        pt, t_here = p, t_before
    if pt == origin_pt and cursor > w0:  # the threads start after the window opens
        parts[PATH_CPU] += cursor - w0
        if keep:
            out.append((w0, cursor, PATH_CPU))
    return parts, sync_wait
