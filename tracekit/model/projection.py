"""The unprofiled step: the replay with the profiler's CPU cost, scaled by the trace's own launch calls, taken out of gaps and calls."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tracekit.analyzers.detectors.launch_blocking import DEFAULT_FAST_LAUNCH_US, DEFAULT_LAUNCH_US
from tracekit.analyzers.step_plan import StepPlan
from tracekit.model.graph import (
    ROLE_LAUNCH,
    ROLE_OTHER,
    ROLE_QUEUE,
    ROLE_SYNC,
    StepGraph,
    step_graphs,
)
from tracekit.model.replay import ReplayCosts, ReplayResult, replay
from tracekit.trace.model import RankTrace

SOURCE_DEFAULT = "default"
SOURCE_CALIBRATION = "calibration"
FAST_LAUNCH_PERCENTILE = 10.0  # the rank's "fast" kernel launch call: its 10th percentile duration
# Without a kernel launch call to scale by (graph launches only, no GPU work): issue 19's "roughly
# 2–3 µs per recorded CPU event", and a launch call carrying the same 2.5 µs.
FALLBACK_PER_EVENT_US = 2.5


@dataclass(frozen=True)
class LaunchProfile:
    """The profiled kernel launch calls (cudaLaunchKernel(ExC), cuLaunchKernel(Ex), ...) of a rank's
    steady steps: how slow this recording's profiler was. fast_us: their FAST_LAUNCH_PERCENTILE-th
    percentile duration (numpy's linear interpolation); median_us: their median; count: how many."""

    fast_us: float
    median_us: float
    count: int


def launch_profile(graphs: tuple[StepGraph, ...]) -> LaunchProfile | None:
    """The kernel launch calls of `graphs` pooled (None when they hold none). Synchronous launches
    (StepGraph.call_blocking: their duration holds their kernel's) are left out; when every launch
    is one, the profiled H200 launch of detectors/launch_blocking.py (DEFAULT_LAUNCH_US) stands in."""
    durations = np.concatenate([g.call_dur_us[g.call_kernel & ~g.call_blocking] for g in graphs]) if graphs \
        else np.empty(0)
    if not len(durations):
        blocked = sum(int(g.call_blocking.sum()) for g in graphs)
        return LaunchProfile(fast_us=DEFAULT_FAST_LAUNCH_US, median_us=DEFAULT_LAUNCH_US, count=0) if blocked else None
    return LaunchProfile(fast_us=float(np.percentile(durations, FAST_LAUNCH_PERCENTILE)),
                         median_us=float(np.median(durations)), count=len(durations))


@dataclass(frozen=True)
class ProfilerOverhead:
    """What the profiler adds to the CPU side, scaled by the recording's own launch calls.

    Under the profiler every launch call runs CUPTI's callbacks and every recorded op Kineto's
    (timestamps, record_shapes' Input Dims/types/strides), and how long they take changes from one
    recording to the next (the same GPT-2 decode profiled in 275–500 ms against 191 ms bare,
    docs/measurements/README.md). The launch calls measure it in the same trace:
    per recorded CPU event = per_event_scale × max(fast launch − launch_free_us, 0);
    launch_free_us: the fast profiled launch at which the recorded events cost nothing (the
    unprofiled call plus CUPTI's fixed part); launch_floor_us: the unprofiled launch call: every
    launch call loses the median launch − launch_floor_us (never going below the floor) and other
    runtime calls lose the same; scale_range: (low, high) of per_event_scale; source says where the
    numbers come from ("default", "calibration", ...)."""

    per_event_scale: float
    launch_free_us: float
    launch_floor_us: float
    scale_range: tuple[float, float]
    source: str
    # What is left of the host gaps after their events' cost, × this: 1 unless a bare timing showed the
    # profiler slowed the Python between recorded events too (outlook.fit_to_bare)
    gap_scale: float = 1.0
    # Bulk pageable device-to-host copies run at no less than this rate (GB/s; each copy's bytes / it,
    # at most its traced duration): None (as traced) unless a bare timing showed the profiler stretched
    # them (outlook.fit_to_bare; docs/model.md, "Pageable device-to-host copies")
    d2h_gbps: float | None = None

    def at(self, per_event_scale: float) -> ProfilerOverhead:
        """The same overhead with per_event_scale set to `per_event_scale` (a bound of the range)."""
        return dataclasses.replace(self, per_event_scale=per_event_scale)

    def per_event_us(self, launches: LaunchProfile | None) -> float:
        """The cost of one recorded CPU event in a recording whose kernel launches are `launches`."""
        if launches is None:
            return FALLBACK_PER_EVENT_US
        return self.per_event_scale * max(launches.fast_us - self.launch_free_us, 0.0)

    def launch_excess_us(self, launches: LaunchProfile | None) -> float:
        """What the profiler adds to a typical launch (or other runtime) call of that recording."""
        if launches is None:
            return FALLBACK_PER_EVENT_US
        return max(launches.median_us - self.launch_floor_us, 0.0)


# Fitted (benchmarks/validate_projection.py, "Leave one out") on the 21 H200 samples timed without a
# profiler (pairs.json run 1, docs/validation.md, optimizer_pairs.json run 1): the mean |log(projected
# / measured)| is least at 3.75 × (fast launch − 3.85 µs); leaving each sample out in turn moves the
# scale over 3.05–4.4 (the range) and launch_free_us over 3.7–3.95 µs. 17 of the 21 are then within
# ±15 % (fitted on all and left out alike). The floor is docs/design.md's unprofiled cudaLaunchKernel
# (~3 µs on current NVIDIA drivers, "Launch cost under the profiler").
DEFAULT_OVERHEAD = ProfilerOverhead(per_event_scale=3.75, launch_free_us=3.85, launch_floor_us=3.0,
                                    scale_range=(3.05, 4.4), source=SOURCE_DEFAULT)


@dataclass(frozen=True)
class StepProjection:
    """One steady step as traced, as replayed, and projected without the profiler (low/high from the scale's range)."""

    step: int
    traced_span_us: float
    replayed_span_us: float
    projected_span_us: float
    projected_low_us: float
    projected_high_us: float
    traced_gpu_busy_share: float
    projected_gpu_busy_share: float
    projected: ReplayResult
    overhead: ProfilerOverhead
    launches: LaunchProfile | None  # the kernel launch calls the correction was scaled by
    per_event_us: float  # the cost per recorded CPU event removed

    @property
    def correction_us(self) -> float:
        """How much shorter the projected step is than the traced one."""
        return self.traced_span_us - self.projected_span_us


def projected_costs(graph: StepGraph, overhead: ProfilerOverhead,
                    launches: LaunchProfile | None = None) -> ReplayCosts:
    """The graph's durations with the profiler's cost removed (`launches`: the rank's kernel launch
    calls, the graph's own when None).

    Gaps (and the stretch from another thread's call to a call that waited for it) lose
    overhead.per_event_us(launches) per recorded event of the call's thread inside them (floor 0);
    launch calls lose overhead.launch_excess_us(launches) down to launch_floor_us (never above the
    recorded duration), and the latency from a launch call to its GPU start loses what the call lost;
    other runtime calls lose the same excess (floor 0); blocking calls keep their waits, which the
    replay recomputes, and their non-waiting part shrinks like a launch. GPU durations are kept, but
    bulk pageable device-to-host copies' run at overhead.d2h_gbps at least (when a bare timing fitted it)."""
    launches = launches if launches is not None else launch_profile((graph,))
    c, c_launch = overhead.per_event_us(launches), overhead.launch_excess_us(launches)
    floor = overhead.launch_floor_us
    gap = graph.call_gap_us
    keep = overhead.gap_scale
    gap_new = np.where(gap > 0, np.maximum(gap - c * graph.call_gap_events, 0.0) * keep, gap)
    wait = graph.call_anchor_gap_us
    wait_new = np.where(wait > 0, np.maximum(wait - c * graph.call_anchor_events, 0.0) * keep, wait)
    dur = graph.call_dur_us
    role = graph.call_role
    as_launch = np.minimum(dur, np.maximum(dur - c_launch, floor))
    dur_new = np.where(role == ROLE_LAUNCH, as_launch, np.where(role == ROLE_OTHER, np.maximum(dur - c_launch, 0.0), dur))
    own = graph.call_own_us
    own_new = np.where(np.isin(role, (ROLE_SYNC, ROLE_QUEUE)), np.minimum(own, np.maximum(own - c_launch, floor)), own)
    shrink = np.where(role == ROLE_QUEUE, own - own_new, dur - dur_new)
    lat = graph.gpu_latency_us
    launch = graph.gpu_launch
    lost = np.where(launch >= 0, shrink[np.maximum(launch, 0)] if graph.n_calls else 0.0, 0.0)
    lat_new = np.where(lat > 0, np.maximum(lat - lost, 0.0), lat)
    tail = graph.tail_us
    tail_new = max(tail - c * graph.tail_events, 0.0) * keep if tail > 0 else tail
    g_dur, call_tail = _d2h_at_rate(graph, overhead.d2h_gbps)
    if call_tail is not None:  # those calls' non-waiting part is their tail (waits.plan_waits)
        own_new = np.where(graph.call_tail_us != call_tail, np.minimum(own_new, call_tail), own_new)
    return ReplayCosts(call_gap_us=gap_new, call_anchor_gap_us=wait_new, call_dur_us=dur_new, call_own_us=own_new, gpu_latency_us=lat_new,
                       tail_us=tail_new, gpu_dur_us=g_dur, call_tail_us=call_tail)


def _d2h_at_rate(graph: StepGraph, gbps: float | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(GPU durations, call tails) with the bulk pageable device-to-host copies at `gbps` at least,
    and the part of their calls after the copy (the CPU draining the last staged chunk) shrunk in
    the same proportion as the copy ((None, None): as traced)."""
    d2h = graph.gpu_d2h_bytes > 0
    if gbps is None or gbps <= 0 or not d2h.any():
        return None, None
    g_dur = np.where(d2h, np.minimum(graph.gpu_dur_us, graph.gpu_d2h_bytes / gbps / 1e3), graph.gpu_dur_us)
    ratio = np.where(graph.gpu_dur_us > 0, g_dur / np.where(graph.gpu_dur_us > 0, graph.gpu_dur_us, 1.0), 1.0)
    tail = graph.call_tail_us.copy()
    mine = d2h & (graph.gpu_launch >= 0)
    tail[graph.gpu_launch[mine]] *= ratio[mine]
    return g_dur, tail


def project(graph: StepGraph, overhead: ProfilerOverhead = DEFAULT_OVERHEAD, *, critical_path: bool = True,
            launches: LaunchProfile | None = None) -> ReplayResult:
    """The replay of the unprofiled step (projected_costs; `launches` the rank's, else the graph's own)."""
    return replay(graph, projected_costs(graph, overhead, launches), critical_path=critical_path)


def project_step(graph: StepGraph, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                 replayed: ReplayResult | None = None, launches: LaunchProfile | None = None) -> StepProjection:
    """Traced, replayed (`replayed` when the trust gate already has it) and projected span of one
    step, the projection at both ends of the scale's range too (`launches`: the rank's kernel launch
    calls, else the step's own)."""
    launches = launches if launches is not None else launch_profile((graph,))
    replayed = replayed if replayed is not None else replay(graph, critical_path=False)
    projected = project(graph, overhead, launches=launches)
    low_scale, high_scale = overhead.scale_range
    # more overhead removed: shorter
    low = project(graph, overhead.at(high_scale), critical_path=False, launches=launches).span_us
    high = project(graph, overhead.at(low_scale), critical_path=False, launches=launches).span_us
    return StepProjection(
        step=graph.step, traced_span_us=graph.traced_span_us, replayed_span_us=replayed.span_us,
        projected_span_us=projected.span_us, projected_low_us=min(low, high), projected_high_us=max(low, high),
        traced_gpu_busy_share=replayed.traced_gpu_busy_share, projected_gpu_busy_share=projected.gpu_busy_share,
        projected=projected, overhead=overhead, launches=launches, per_event_us=overhead.per_event_us(launches),
    )


def project_steps(rank: RankTrace, plan: StepPlan, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                  graphs: tuple[StepGraph, ...] | None = None,
                  replays: tuple[ReplayResult, ...] | None = None) -> tuple[StepProjection, ...]:
    """project_step for every selected (steady) step of the rank, all scaled by the kernel launch
    calls of those steps pooled (`graphs` and their unmodified `replays`, e.g. from the trust gate,
    are reused when given)."""
    graphs = graphs if graphs is not None else step_graphs(rank, plan)
    given = replays if replays is not None and len(replays) == len(graphs) else (None,) * len(graphs)
    launches = launch_profile(graphs)
    return tuple(project_step(graph, overhead, done, launches) for graph, done in zip(graphs, given, strict=True))
