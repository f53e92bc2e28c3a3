"""The unprofiled step: the replay with the profiler's per-event CPU cost taken out of gaps and launch calls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


@dataclass(frozen=True)
class ProfilerOverhead:
    """What the profiler adds to the CPU side, per recorded event.

    per_event_us: cost of one recorded CPU event (op, annotation) paid in the host time around it;
    launch_overhead_us: what a profiled launch call's own span carries (CUPTI's callbacks);
    launch_floor_us: the unprofiled cost of a launch call, below which a projection never goes;
    per_event_range_us: (low, high) of per_event_us and of launch_overhead_us alike; source says
    where the numbers come from ("default", "calibration", ...)."""

    per_event_us: float
    launch_overhead_us: float
    launch_floor_us: float
    per_event_range_us: tuple[float, float]
    source: str

    def at(self, per_event_us: float) -> ProfilerOverhead:
        """The same overhead with per-event and launch costs set to `per_event_us` (a bound of the range)."""
        return ProfilerOverhead(per_event_us, per_event_us, self.launch_floor_us, self.per_event_range_us, self.source)


# Issue 19 measured tracekit's profiler settings (CPU + CUDA activities, record_shapes) on an H200 over
# nine workloads, each also timed without a profiler: "roughly 2–3 µs per recorded CPU event, most of it
# between the recorded spans"; taken as 2.5 ± 0.5 µs. A launch call is one recorded event, so its span
# carries the same cost (CUPTI's enter/exit callbacks). The floor is docs/design.md's unprofiled
# cudaLaunchKernel (~3 µs on current NVIDIA drivers, "Launch cost under the profiler").
DEFAULT_OVERHEAD = ProfilerOverhead(per_event_us=2.5, launch_overhead_us=2.5, launch_floor_us=3.0,
                                    per_event_range_us=(2.0, 3.0), source=SOURCE_DEFAULT)


@dataclass(frozen=True)
class StepProjection:
    """One steady step as traced, as replayed, and projected without the profiler (low/high from the range)."""

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

    @property
    def correction_us(self) -> float:
        """How much shorter the projected step is than the traced one."""
        return self.traced_span_us - self.projected_span_us


def projected_costs(graph: StepGraph, overhead: ProfilerOverhead) -> ReplayCosts:
    """The graph's durations with the profiler's cost removed.

    Gaps (and the stretch from another thread's call to a call that waited for it) lose per_event_us
    per recorded event of the call's thread inside them (floor 0); launch calls lose
    launch_overhead_us down to launch_floor_us (never above the recorded duration), and the latency
    from a launch call to its GPU start loses what the call lost; other runtime calls lose
    launch_overhead_us (floor 0); blocking calls keep their waits, which the replay recomputes, and
    their non-waiting part shrinks like a launch. GPU durations are kept."""
    c, c_launch, floor = overhead.per_event_us, overhead.launch_overhead_us, overhead.launch_floor_us
    gap = graph.call_gap_us
    gap_new = np.where(gap > 0, np.maximum(gap - c * graph.call_gap_events, 0.0), gap)
    wait = graph.call_anchor_gap_us
    wait_new = np.where(wait > 0, np.maximum(wait - c * graph.call_anchor_events, 0.0), wait)
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
    tail_new = max(tail - c * graph.tail_events, 0.0) if tail > 0 else tail
    return ReplayCosts(call_gap_us=gap_new, call_anchor_gap_us=wait_new, call_dur_us=dur_new, call_own_us=own_new, gpu_latency_us=lat_new,
                       tail_us=tail_new)


def project(graph: StepGraph, overhead: ProfilerOverhead = DEFAULT_OVERHEAD, *,
            critical_path: bool = True) -> ReplayResult:
    """The replay of the unprofiled step (projected_costs)."""
    return replay(graph, projected_costs(graph, overhead), critical_path=critical_path)


def project_step(graph: StepGraph, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                 replayed: ReplayResult | None = None) -> StepProjection:
    """Traced, replayed (`replayed` when the trust gate already has it) and projected span of one
    step, the projection at both ends of the range too."""
    replayed = replayed if replayed is not None else replay(graph, critical_path=False)
    projected = project(graph, overhead)
    low_c, high_c = overhead.per_event_range_us
    low = project(graph, overhead.at(high_c), critical_path=False).span_us  # more overhead removed: shorter
    high = project(graph, overhead.at(low_c), critical_path=False).span_us
    return StepProjection(
        step=graph.step, traced_span_us=graph.traced_span_us, replayed_span_us=replayed.span_us,
        projected_span_us=projected.span_us, projected_low_us=min(low, high), projected_high_us=max(low, high),
        traced_gpu_busy_share=replayed.traced_gpu_busy_share, projected_gpu_busy_share=projected.gpu_busy_share,
        projected=projected, overhead=overhead,
    )


def project_steps(rank: RankTrace, plan: StepPlan, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                  graphs: tuple[StepGraph, ...] | None = None,
                  replays: tuple[ReplayResult, ...] | None = None) -> tuple[StepProjection, ...]:
    """project_step for every selected (steady) step of the rank (`graphs` and their unmodified
    `replays`, e.g. from the trust gate, are reused when given)."""
    graphs = graphs if graphs is not None else step_graphs(rank, plan)
    given = replays if replays is not None and len(replays) == len(graphs) else (None,) * len(graphs)
    return tuple(project_step(graph, overhead, done) for graph, done in zip(graphs, given, strict=True))
