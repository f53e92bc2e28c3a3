"""Event-driven replay of a step graph with recorded or modified durations, and its critical path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.model.graph import ROLE_QUEUE, ROLE_SYNC, StepGraph
from tracekit.trace.intervals import merge_intervals

# Labels of critical-path segments.
PATH_CPU, PATH_LAUNCH, PATH_SYNC, PATH_GPU = 0, 1, 2, 3


@dataclass(frozen=True)
class CriticalPath:
    """The replayed step's span split by what its critical path was doing (the four parts add up to the span).

    cpu_gap_us: recorded host work between runtime calls; launch_us: launch (and other runtime) calls
    and the latency from a launch to its GPU start; sync_us: the non-waiting part of blocking calls;
    gpu_us: GPU work the step waited for (including earlier steps' work still running).
    sync_wait_us (not part of the sum): time the CPU sat blocked in syncs and full-queue launches on the path."""

    cpu_gap_us: float
    launch_us: float
    sync_us: float
    gpu_us: float
    sync_wait_us: float

    @property
    def total_us(self) -> float:
        return self.cpu_gap_us + self.launch_us + self.sync_us + self.gpu_us


@dataclass(frozen=True, eq=False)
class ReplayCosts:
    """Durations to replay with instead of the graph's own (None keeps the graph's array)."""

    call_gap_us: np.ndarray | None = None
    call_dur_us: np.ndarray | None = None
    call_own_us: np.ndarray | None = None
    gpu_dur_us: np.ndarray | None = None
    gpu_latency_us: np.ndarray | None = None
    tail_us: float | None = None


@dataclass(frozen=True)
class ReplayResult:
    """One replayed step: its span against the traced one, the GPU busy time and the critical path."""

    rank: int
    step: int
    traced_span_us: float
    span_us: float
    cpu_end_us: float  # replayed CPU-side end, µs after the window start (NaN: GPU-side window)
    gpu_end_us: float  # replayed end of the step's GPU work, µs after the window start
    gpu_busy_us: float
    traced_gpu_busy_us: float
    path: CriticalPath

    @property
    def error(self) -> float:
        """(replayed − traced) / traced span."""
        return (self.span_us - self.traced_span_us) / self.traced_span_us if self.traced_span_us > 0 else 0.0

    @property
    def gpu_busy_share(self) -> float:
        return self.gpu_busy_us / self.span_us if self.span_us > 0 else 0.0

    @property
    def traced_gpu_busy_share(self) -> float:
        return self.traced_gpu_busy_us / self.traced_span_us if self.traced_span_us > 0 else 0.0


def busy_in(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Union length of the intervals, clipped to [lo, hi]."""
    if not len(starts) or hi <= lo:
        return 0.0
    s, e = merge_intervals(np.clip(starts, lo, hi), np.clip(ends, lo, hi))
    return float((e - s).sum())


def replay(graph: StepGraph, costs: ReplayCosts | None = None) -> ReplayResult:
    """Replay `graph` (model/graph.py:StepGraph's rules) with its recorded durations or `costs`."""
    costs = costs if costs is not None else ReplayCosts()
    pick = _values
    gap = pick(costs.call_gap_us, graph.call_gap_us)
    dur = pick(costs.call_dur_us, graph.call_dur_us)
    own = pick(costs.call_own_us, graph.call_own_us)
    g_dur = pick(costs.gpu_dur_us, graph.gpu_dur_us)
    lat = pick(costs.gpu_latency_us, graph.gpu_latency_us)
    tail_us = graph.tail_us if costs.tail_us is None else costs.tail_us
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    origin = graph.origin_us
    prev, role, waits = graph.call_prev.tolist(), graph.call_role.tolist(), graph.call_waits.tolist()
    tail, floor = graph.call_tail_us.tolist(), graph.call_wait_floor_us.tolist()
    ptr, wnodes = graph.wait_ptr.tolist(), graph.wait_nodes.tolist()
    launch, g_prev = graph.gpu_launch.tolist(), graph.gpu_prev.tolist()
    free, g_ts, g_gap = graph.gpu_free_us.tolist(), graph.gpu_ts_us.tolist(), graph.gpu_gap_us.tolist()
    # points: call starts [0, n), call ends [n, 2n), GPU starts [2n, 2n+g), GPU ends [2n+g, 2n+2g), origin
    start = graph.call_ts_us.tolist()
    end = graph.traced_call_end_us.tolist()
    gs = list(g_ts)
    ge = graph.traced_gpu_end_us.tolist()
    origin_pt = 2 * n_calls + 2 * n_gpu
    pred = [origin_pt] * (origin_pt + 1)
    label = [PATH_GPU] * (origin_pt + 1)
    blocked = [0.0] * n_calls
    for item in graph.order.tolist():
        if item < n_calls:
            i = item
            p = prev[i]
            base, pred[i] = (end[p], n_calls + p) if p >= 0 else (origin, origin_pt)
            start[i] = base + gap[i]
            label[i] = PATH_CPU
            if not waits[i]:
                end[i] = start[i] + dur[i]
                pred[n_calls + i] = i
                label[n_calls + i] = PATH_SYNC if role[i] == ROLE_SYNC else PATH_LAUNCH
        elif item < n_calls + n_gpu:
            j = item - n_calls
            i, p = launch[j], g_prev[j]
            by_launch = start[i] + lat[j] if i >= 0 else g_ts[j]
            by_stream = (ge[p] if p >= 0 else free[j]) + g_gap[j]
            pt = 2 * n_calls + j
            if by_launch >= by_stream:
                gs[j] = by_launch
                pred[pt], label[pt] = (i, PATH_LAUNCH) if i >= 0 else (origin_pt, PATH_GPU)
            else:
                gs[j] = by_stream
                pred[pt], label[pt] = (2 * n_calls + n_gpu + p, PATH_GPU) if p >= 0 else (origin_pt, PATH_GPU)
            ge[j] = gs[j] + g_dur[j]
            pred[pt + n_gpu], label[pt + n_gpu] = pt, PATH_GPU
        else:
            i = item - n_calls - n_gpu
            awaited, last = floor[i], origin_pt
            for j in wnodes[ptr[i]:ptr[i + 1]]:
                if ge[j] > awaited:
                    awaited, last = ge[j], 2 * n_calls + n_gpu + j
            mine = own[i] if role[i] in (ROLE_SYNC, ROLE_QUEUE) else dur[i]
            by_self, by_gpu = start[i] + mine, awaited + tail[i]
            pt = n_calls + i
            if by_self >= by_gpu:
                end[i], pred[pt] = by_self, i
                label[pt] = PATH_SYNC if role[i] == ROLE_SYNC else PATH_LAUNCH
            else:
                end[i], pred[pt], label[pt] = by_gpu, last, PATH_SYNC
                blocked[i] = max(awaited - start[i], 0.0)
    return _result(graph, start, end, gs, ge, pred, label, blocked, tail_us, origin_pt)


def _values(given: np.ndarray | None, own: np.ndarray) -> list[float]:
    return [float(x) for x in (own if given is None else given).tolist()]


def _result(graph: StepGraph, start: list[float], end: list[float], gs: list[float], ge: list[float],
            pred: list[int], label: list[int], blocked: list[float], tail_us: float, origin_pt: int) -> ReplayResult:
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    w0 = graph.window_start_us
    times = start + end + gs + ge + [graph.origin_us]
    g_start, g_end = np.array(gs), np.array(ge)
    gpu_end = float(g_end.max()) if n_gpu else w0
    candidates: list[tuple[float, int, int]] = []  # (time, point, label of the last segment)
    cpu_end = float("nan")
    if graph.gpu_side:
        span_end = max(gpu_end, w0)
    else:
        last = graph.main_last_call
        cpu_from, from_pt = (end[last], n_calls + last) if last >= 0 else (graph.origin_us, origin_pt)
        cpu_end = cpu_from + tail_us
        candidates.append((cpu_end, from_pt, PATH_CPU))
        span_end = max(cpu_end, gpu_end, w0)
    if n_gpu:
        j = int(np.argmax(g_end))
        candidates.append((gpu_end, 2 * n_calls + n_gpu + j, PATH_GPU))
    parts = [0.0, 0.0, 0.0, 0.0]
    sync_wait = 0.0
    best = max(candidates) if candidates else None
    if best is None or best[0] < w0:
        parts[PATH_GPU] += span_end - w0  # the window opens on earlier steps' GPU work
    else:
        top, pt, seg = best
        parts[seg] += max(top - max(times[pt], w0), 0.0)
        while pt != origin_pt and times[pt] > w0:
            p = pred[pt]
            parts[label[pt]] += max(times[pt] - max(times[p], w0), 0.0)
            if n_calls <= pt < 2 * n_calls:
                sync_wait += blocked[pt - n_calls]
            pt = p
        if pt == origin_pt and graph.origin_us > w0:
            parts[PATH_CPU] += graph.origin_us - w0
    busy = busy_in(g_start, g_end, w0, span_end)
    traced_busy = busy_in(graph.gpu_ts_us, graph.traced_gpu_end_us, w0, graph.window_end_us)
    return ReplayResult(
        rank=graph.rank, step=graph.step, traced_span_us=graph.traced_span_us, span_us=span_end - w0,
        cpu_end_us=cpu_end - w0, gpu_end_us=gpu_end - w0, gpu_busy_us=busy, traced_gpu_busy_us=traced_busy,
        path=CriticalPath(cpu_gap_us=parts[PATH_CPU], launch_us=parts[PATH_LAUNCH], sync_us=parts[PATH_SYNC],
                          gpu_us=parts[PATH_GPU], sync_wait_us=sync_wait),
    )
