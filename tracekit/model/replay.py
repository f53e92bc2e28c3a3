"""Event-driven replay of a step graph with recorded or modified durations, and its critical path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.model.chains import PATH_CPU, PATH_GPU, PATH_LAUNCH, PATH_SYNC, chain_timeline
from tracekit.model.graph import ROLE_SYNC, StepGraph, busy_in
from tracekit.model.path import step_end, walk


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
    call_anchor_gap_us: np.ndarray | None = None
    call_dur_us: np.ndarray | None = None
    call_own_us: np.ndarray | None = None
    gpu_dur_us: np.ndarray | None = None
    gpu_latency_us: np.ndarray | None = None
    tail_us: float | None = None
    call_tail_us: np.ndarray | None = None  # a waiting call's part after the end it awaited
    call_nowait: np.ndarray | None = None  # bool per call: a waiting call that no longer waits (ends at start + call_dur_us)


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
    path: CriticalPath | None  # None when the replay was asked for the span only

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


@dataclass(frozen=True, eq=False)
class ReplayPoints:
    """A replayed step's points (call starts [0, n), call ends [n, 2n), GPU starts [2n, 2n+g), GPU ends
    [2n+g, 2n+2g), the origin) and, when the critical path was asked for, each point's predecessor
    on it and the label of the segment leading to it (model/chains.py PATH_*)."""

    call_start: np.ndarray
    call_end: np.ndarray
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    pred: list[int]
    label: list[int]
    blocked: list[float]  # per call: time blocked waiting for the GPU (syncs, full-queue launches)
    tail_us: float
    origin_pt: int

    def times(self, graph: StepGraph) -> list[float]:
        """Every point's time, indexed like `pred`."""
        out: list[float] = np.concatenate([self.call_start, self.call_end, self.gpu_start, self.gpu_end,
                                           [graph.origin_us]]).tolist()
        return out


def replay(graph: StepGraph, costs: ReplayCosts | None = None, *, critical_path: bool = True,
           vectorised: bool = True) -> ReplayResult:
    """Replay `graph` (model/graph.py:StepGraph's rules) with its recorded durations or `costs`;
    critical_path=False skips the critical path (result.path None); vectorised=False forces the
    event loop even where model/chains.py applies (the reference the vectorised path is tested against)."""
    points = replay_points(graph, costs, critical_path=critical_path, vectorised=vectorised)
    return replay_result(graph, points, critical_path and bool(points.pred))


def replay_points(graph: StepGraph, costs: ReplayCosts | None = None, *, critical_path: bool = True,
                  vectorised: bool = True) -> ReplayPoints:
    """The replayed times of `graph`'s points (see replay); pred and label empty when critical_path is False."""
    costs = costs if costs is not None else ReplayCosts()
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    origin_pt = 2 * n_calls + 2 * n_gpu
    tail_us = graph.tail_us if costs.tail_us is None else costs.tail_us
    call_waits = graph.call_waits if costs.call_nowait is None else graph.call_waits & ~costs.call_nowait
    if vectorised and not call_waits.any() and not (graph.call_anchor >= 0).any():
        # no call waits for the GPU or another thread: the vectorised replay (model/chains.py)
        timeline = chain_timeline(
            graph, _array(costs.call_gap_us, graph.call_gap_us), _array(costs.call_dur_us, graph.call_dur_us),
            _array(costs.gpu_dur_us, graph.gpu_dur_us), _array(costs.gpu_latency_us, graph.gpu_latency_us),
            critical_path=critical_path)
        return ReplayPoints(timeline.call_start, timeline.call_end, timeline.gpu_start, timeline.gpu_end,
                            timeline.pred.tolist() if timeline.pred is not None else [],
                            timeline.label.tolist() if timeline.label is not None else [], [0.0] * n_calls,
                            tail_us, origin_pt)
    if not critical_path:
        start, end, gs, ge = _event_times(graph, costs, call_waits)
        return ReplayPoints(np.array(start), np.array(end), np.array(gs), np.array(ge), [], [], [0.0] * n_calls,
                            tail_us, origin_pt)
    pick = _values
    gap = pick(costs.call_gap_us, graph.call_gap_us)
    anchor_gap = pick(costs.call_anchor_gap_us, graph.call_anchor_gap_us)
    anchor = graph.call_anchor.tolist()
    dur = pick(costs.call_dur_us, graph.call_dur_us)
    own = pick(costs.call_own_us, graph.call_own_us)
    g_dur = pick(costs.gpu_dur_us, graph.gpu_dur_us)
    lat = pick(costs.gpu_latency_us, graph.gpu_latency_us)
    origin = graph.origin_us
    prev, role, waits = graph.call_prev.tolist(), graph.call_role.tolist(), call_waits.tolist()
    tail, floor = pick(costs.call_tail_us, graph.call_tail_us), graph.call_wait_floor_us.tolist()
    ptr, wnodes = graph.wait_ptr.tolist(), graph.wait_nodes.tolist()
    inherit = graph.call_wait_inherit.tolist()
    got: dict[int, tuple[float, int]] = {}  # device sync -> (latest end it awaits, that point)
    launch, g_prev = graph.gpu_launch.tolist(), graph.gpu_prev.tolist()
    free, g_ts, g_gap = graph.gpu_free_us.tolist(), graph.gpu_ts_us.tolist(), graph.gpu_gap_us.tolist()
    pin = graph.gpu_pin_us.tolist()
    # points: call starts [0, n), call ends [n, 2n), GPU starts [2n, 2n+g), GPU ends [2n+g, 2n+2g), origin
    start = graph.call_ts_us.tolist()
    end = graph.traced_call_end_us.tolist()
    gs = list(g_ts)
    ge = graph.traced_gpu_end_us.tolist()
    pred = [origin_pt] * (origin_pt + 1)
    label = [PATH_GPU] * (origin_pt + 1)
    blocked = [0.0] * n_calls
    for item in graph.order.tolist():
        if item < n_calls:
            i = item
            p = prev[i]
            base, pred[i] = (end[p], n_calls + p) if p >= 0 else (origin, origin_pt)
            start[i] = base + gap[i]
            a = anchor[i]
            if a >= 0 and end[a] + anchor_gap[i] > start[i]:
                start[i], pred[i] = end[a] + anchor_gap[i], n_calls + a
            label[i] = PATH_CPU
            if not waits[i]:
                end[i] = start[i] + dur[i]
                pred[n_calls + i] = i
                label[n_calls + i] = PATH_SYNC if role[i] == ROLE_SYNC else PATH_LAUNCH
        elif item < n_calls + n_gpu:
            j = item - n_calls
            i, p = launch[j], g_prev[j]
            by_launch = start[i] + lat[j] if i >= 0 else pin[j]
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
            h = inherit[i]
            if h >= 0 and got[h][0] > awaited:  # what the earlier device sync of the thread awaited
                awaited, last = got[h]
            for j in wnodes[ptr[i]:ptr[i + 1]]:
                if ge[j] > awaited:
                    awaited, last = ge[j], 2 * n_calls + n_gpu + j
            got[i] = awaited, last  # also when its own wait is removed: a later sync still waits for that work
            if not waits[i]:
                continue  # its wait was removed: it ended at its start + its duration
            mine = own[i]  # a sync's or a queue's non-waiting part; a launch waiting for its own copy: its tail
            by_self, by_gpu = start[i] + mine, awaited + tail[i]
            pt = n_calls + i
            if by_self >= by_gpu:
                end[i], pred[pt] = by_self, i
                label[pt] = PATH_SYNC if role[i] == ROLE_SYNC else PATH_LAUNCH
            else:
                end[i], pred[pt], label[pt] = by_gpu, last, PATH_SYNC
                blocked[i] = max(awaited - start[i], 0.0)
    return ReplayPoints(np.array(start), np.array(end), np.array(gs), np.array(ge), pred, label, blocked,
                        tail_us, origin_pt)


def _event_times(graph: StepGraph, costs: ReplayCosts, call_waits: np.ndarray
                 ) -> tuple[list[float], list[float], list[float], list[float]]:
    """replay_points' event loop for the times alone (call starts and ends, GPU starts and ends): the
    same comparisons and sums in the same order, without each point's predecessor, label and blocked
    time, which only the critical path reads (the fits to bare steps replay a step a few hundred times)."""
    pick = _values
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    gap, anchor_gap = pick(costs.call_gap_us, graph.call_gap_us), pick(costs.call_anchor_gap_us, graph.call_anchor_gap_us)
    dur, own = pick(costs.call_dur_us, graph.call_dur_us), pick(costs.call_own_us, graph.call_own_us)
    g_dur, lat = pick(costs.gpu_dur_us, graph.gpu_dur_us), pick(costs.gpu_latency_us, graph.gpu_latency_us)
    tail, floor = pick(costs.call_tail_us, graph.call_tail_us), graph.call_wait_floor_us.tolist()
    anchor, prev, waits = graph.call_anchor.tolist(), graph.call_prev.tolist(), call_waits.tolist()
    ptr, wnodes, inherit = graph.wait_ptr.tolist(), graph.wait_nodes.tolist(), graph.call_wait_inherit.tolist()
    launch, g_prev = graph.gpu_launch.tolist(), graph.gpu_prev.tolist()
    free, g_gap, pin = graph.gpu_free_us.tolist(), graph.gpu_gap_us.tolist(), graph.gpu_pin_us.tolist()
    origin = graph.origin_us
    start, end = graph.call_ts_us.tolist(), graph.traced_call_end_us.tolist()
    gs, ge = graph.gpu_ts_us.tolist(), graph.traced_gpu_end_us.tolist()
    got: dict[int, float] = {}  # device sync -> the latest end it awaits
    for item in graph.order.tolist():
        if item < n_calls:
            p = prev[item]
            s = (end[p] if p >= 0 else origin) + gap[item]
            a = anchor[item]
            if a >= 0 and end[a] + anchor_gap[item] > s:
                s = end[a] + anchor_gap[item]
            start[item] = s
            if not waits[item]:
                end[item] = s + dur[item]
        elif item < n_calls + n_gpu:
            j = item - n_calls
            i, p = launch[j], g_prev[j]
            by_launch = start[i] + lat[j] if i >= 0 else pin[j]
            by_stream = (ge[p] if p >= 0 else free[j]) + g_gap[j]
            gs[j] = by_launch if by_launch >= by_stream else by_stream
            ge[j] = gs[j] + g_dur[j]
        else:
            i = item - n_calls - n_gpu
            awaited = floor[i]
            h = inherit[i]
            if h >= 0 and got[h] > awaited:
                awaited = got[h]
            for j in wnodes[ptr[i]:ptr[i + 1]]:
                if ge[j] > awaited:
                    awaited = ge[j]
            got[i] = awaited
            if waits[i]:
                by_self, by_gpu = start[i] + own[i], awaited + tail[i]
                end[i] = by_self if by_self >= by_gpu else by_gpu
    return start, end, gs, ge


def _array(given: np.ndarray | None, own: np.ndarray) -> np.ndarray:
    return own if given is None else given


def _values(given: np.ndarray | None, own: np.ndarray) -> list[float]:
    values: list[float] = (own if given is None else given).tolist()
    return values


def replay_result(graph: StepGraph, points: ReplayPoints, critical_path: bool) -> ReplayResult:
    """Span, GPU busy time and (when asked) the critical path's parts: its stretches (model/path.py
    walk, the walk critical_segments lists) summed by kind."""
    w0 = graph.window_start_us
    end = step_end(graph, points.call_end, points.gpu_end, points.tail_us, points.origin_pt)
    parts, sync_wait = [0.0, 0.0, 0.0, 0.0], 0.0
    if critical_path:
        parts, sync_wait = walk(graph, points.times(graph), points.pred, points.label, points.blocked, end,
                                points.origin_pt)
    span_end = end.span_end_us
    busy = busy_in(points.gpu_start, points.gpu_end, w0, span_end)
    return ReplayResult(
        rank=graph.rank, step=graph.step, traced_span_us=graph.traced_span_us, span_us=span_end - w0,
        cpu_end_us=end.cpu_end_us - w0, gpu_end_us=end.gpu_end_us - w0, gpu_busy_us=busy,
        traced_gpu_busy_us=graph.traced_gpu_busy_us,
        path=CriticalPath(cpu_gap_us=parts[PATH_CPU], launch_us=parts[PATH_LAUNCH], sync_us=parts[PATH_SYNC],
                          gpu_us=parts[PATH_GPU], sync_wait_us=sync_wait) if critical_path else None,
    )
