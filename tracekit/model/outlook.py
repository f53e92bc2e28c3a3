"""A rank's model: the trust gate, each steady step projected without the profiler (calibrated by the trace's own bare timings when it has them), and what-if replays."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tracekit.analyzers.launch import LaunchOverhead
from tracekit.analyzers.totals import LaunchTotals
from tracekit.analyzers.unprofiled import Unprofiled, shrink_idle
from tracekit.model.fidelity import Fidelity, gated_graphs
from tracekit.model.graph import ROLE_LAUNCH, ROLE_OTHER, StepGraph
from tracekit.model.projection import (
    DEFAULT_OVERHEAD,
    LaunchProfile,
    ProfilerOverhead,
    launch_profile,
    projected_costs,
)
from tracekit.model.replay import ReplayCosts, ReplayResult, replay, replay_points, replay_result
from tracekit.trace.model import RankTrace

SOURCE_BARE = "bare"
# The fitted scale of a bare-calibrated projection is searched over [0, MAX_SCALE] × the default;
# its range is the fit ± BARE_SPREAD (the bare step's own run-to-run spread on the H200 samples is
# 1–3 %: docs/measurements/pairs.json, runs 1–3).
# The gap between two kernels queued back to back on a stream: the median over the stream-bound
# kernels of the H200 sample traces sample_traces/bare/train_{sync_fixed,gpu_bound,copies_fixed,
# dataloader_fixed} is 1.38-1.50 µs (p90 2.1-2.3 µs)
FREE_RUN_GAP_US = 1.5
MAX_SCALE = 2.0
BARE_SPREAD = 0.15
FIT_ROUNDS = 14
FIT_TOL = 1e-3  # a fitted stage reached the bare step when the median is within this share of it (the bisection's own precision)
PLATEAU_TOL = 0.002  # a span within this share of the least the host can reach is on the GPU's floor
STEP_FIT = 0.02  # a step's own fit must reach its bare time within this share (else one fit for all)
STEP_SPREAD = 1.1  # ... and the bare steps must agree within this factor (slowest / fastest)
# A host the GPU hides (the bare step is the GPU's floor) is taken at most at this share of its traced
# length: the median projected / traced host path (replayed without GPU time) over the host-bound
# recordings with bare steps of both validation machines (H100 44 traces, 0.55, quartiles 0.47-0.65;
# H200 66 traces, 0.555, quartiles 0.46-0.72; docs/model.md "Hidden hosts").
HIDDEN_HOST_SHARE = 0.55


@dataclass(frozen=True, eq=False)
class StepModel:
    """One steady step: its graph, the projected (unprofiled) costs and their replay, its traced totals."""

    graph: StepGraph
    costs: ReplayCosts
    projected: ReplayResult
    traced: LaunchTotals


@dataclass(frozen=True)
class WhatIf:
    """A change replayed on every modelled step: the projected unprofiled spans before and after (summed)."""

    before_us: float
    after_us: float
    steps: int

    @property
    def saving_us(self) -> float:
        """Projected unprofiled time saved over the steps (never negative, never above `before_us`)."""
        return min(max(self.before_us - self.after_us, 0.0), self.before_us)

    @property
    def per_step_us(self) -> float:
        return self.saving_us / self.steps if self.steps else 0.0


Transform = Callable[[StepModel], ReplayCosts]


@dataclass(frozen=True, eq=False)
class RankModel:
    """The model of one rank: the gate's verdict, the profiler cost removed, the modelled steps and
    the Unprofiled totals they add up to (the traced totals where the model abstains)."""

    rank: int
    fidelity: Fidelity
    overhead: ProfilerOverhead
    launches: LaunchProfile | None
    steps: tuple[StepModel, ...]
    unprofiled: Unprofiled

    @property
    def trusted(self) -> bool:
        return bool(self.steps)

    def what_if(self, transform: Transform) -> WhatIf | None:
        """Replay every modelled step with `transform`'s costs (None when the model abstains)."""
        if not self.steps:
            return None
        before = sum(s.projected.span_us for s in self.steps)
        after = sum(_after_span(s, transform(s)) for s in self.steps)
        return WhatIf(before_us=before, after_us=after, steps=len(self.steps))


def _after_span(step: StepModel, costs: ReplayCosts) -> float:
    """The step replayed with `costs`. When they free a step whose CPU waited for the GPU (no call
    waits any more), the loop runs free: the CPU queues the next step's work while the GPU runs this
    one's, so in the steady state a step takes the longer of the CPU's own time and the GPU's own
    (its busy time and a FREE_RUN_GAP_US between kernels, at most its first start to its last end),
    not the one-step replay, which starts the GPU idle at the window and so keeps every host
    gap before the step's first launch on the path."""
    g = step.graph
    points = replay_points(g, costs, critical_path=False)
    result = replay_result(g, points, critical_path=False)
    freed = costs.call_nowait is not None and g.call_waits.any() and not (g.call_waits & ~costs.call_nowait).any()
    if not freed or g.gpu_side or not np.isfinite(result.cpu_end_us) or not g.n_gpu:
        return result.span_us
    first_to_last = result.gpu_end_us - (float(points.gpu_start.min()) - g.window_start_us)
    gpu_own = min(first_to_last, result.gpu_busy_us + (g.n_gpu - 1) * FREE_RUN_GAP_US)
    return min(result.span_us, max(result.cpu_end_us, gpu_own))


def _launch_time(graph: StepGraph, dur: np.ndarray) -> float:
    return float(dur[np.isin(graph.call_role, (ROLE_LAUNCH, ROLE_OTHER))].sum())


def _spans(graphs: tuple[StepGraph, ...], overhead: ProfilerOverhead, launches: LaunchProfile | None) -> list[float]:
    return [replay(g, projected_costs(g, overhead, launches), critical_path=False).span_us for g in graphs]


def _bisect(span_at: Callable[[float], float], lo: float, hi: float, target_us: float) -> float:
    """x in [lo, hi] where the (decreasing) span_at(x) meets target_us, clipped to the ends."""
    if span_at(lo) <= target_us:
        return lo
    if span_at(hi) >= target_us:
        return hi
    for _ in range(FIT_ROUNDS):
        mid = 0.5 * (lo + hi)
        if span_at(mid) > target_us:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def d2h_rates(graphs: tuple[StepGraph, ...]) -> tuple[float, float] | None:
    """(slowest, fastest) rate in GB/s of the bulk pageable device-to-host copies of `graphs` as
    traced (None when they hold none)."""
    nbytes = np.concatenate([g.gpu_d2h_bytes for g in graphs]) if graphs else np.empty(0)
    dur = np.concatenate([g.gpu_dur_us for g in graphs]) if graphs else np.empty(0)
    bulk = (nbytes > 0) & (dur > 0)
    if not bulk.any():
        return None
    rate = nbytes[bulk] / dur[bulk] / 1e3
    return float(rate.min()), float(rate.max())


def _at_scale(o: ProfilerOverhead, x: float) -> ProfilerOverhead:
    """`o` at per-event scale `x`, fitted to bare steps (range ± BARE_SPREAD)."""
    return dataclasses.replace(o, per_event_scale=x, source=SOURCE_BARE,
                               scale_range=(x * (1 - BARE_SPREAD), x * (1 + BARE_SPREAD)))


def _gpu_floor_fit(median_at: Callable[[ProfilerOverhead], float], base: ProfilerOverhead, hi: float,
                   floor: float, graphs: tuple[StepGraph, ...] = (), launches: LaunchProfile | None = None
                   ) -> ProfilerOverhead:
    """The fit when no host cost reaches the bare step (the step at its least host, `floor`, is still
    longer: the GPU's own time sets it): the least host reduction that reaches the floor within
    PLATEAU_TOL (a per-event scale from 0, then smaller host gaps; the bare time says nothing more of
    a host hidden behind the GPU), then the host at most HIDDEN_HOST_SHARE of its traced length
    (_hidden_host). Pushing the host to its least, as the plain fit would, leaves too little of it for
    a what-if that shortens the GPU side (H200 heldout5 no_kv_cache, its cached variant host-bound); so
    did starting the search at `base`'s scale, which already cut held-out esm_mlm_fp32's host (H100,
    GPU-bound fp32 training) to 1.6-10 ms of its 33-51 ms traced, where the bf16 variant's host, fitted
    to its own bare steps, is 26-30 ms: lower_precision's what-if predicted 37.4 ms against 21.1 measured."""
    goal = floor * (1 + PLATEAU_TOL)
    scale = _bisect(lambda x: median_at(base.at(x)), 0.0, hi, goal)
    fitted = _at_scale(base, scale)
    if median_at(fitted) > goal:
        keep = _bisect(lambda k: median_at(dataclasses.replace(fitted, gap_scale=1.0 - k)), 0.0, 1.0, goal)
        fitted = dataclasses.replace(fitted, gap_scale=1.0 - keep)
    return _hidden_host(graphs, fitted, launches, hi) if graphs else fitted


def _host_us(graphs: tuple[StepGraph, ...], o: ProfilerOverhead | None, launches: LaunchProfile | None) -> float:
    """The median host path of `graphs` under `o` (None: as traced): each step replayed with no GPU time."""
    spans = []
    for g in graphs:
        own = projected_costs(g, o, launches) if o is not None else ReplayCosts()
        costs = dataclasses.replace(own, gpu_dur_us=np.zeros(g.n_gpu))
        spans.append(replay(g, costs, critical_path=False).span_us)
    return float(np.median(spans))


def _hidden_host(graphs: tuple[StepGraph, ...], fitted: ProfilerOverhead, launches: LaunchProfile | None,
                 hi: float) -> ProfilerOverhead:
    """`fitted` (the least host reduction that reaches the GPU's floor) with the host path shortened to
    HIDDEN_HOST_SHARE of its traced length where it keeps more: a hidden host's length is unknown, and
    the least reduction keeps it just under the floor (H100 heldout10 autocast_decode: 0.83 of the traced
    host, where its bf16 variant's fit keeps 0.47; a what-if that shortens the GPU then left a host path
    of 42 ms against 22.4 ms measured). The per-event scale goes up first (to `hi`), then the gaps shrink."""
    traced = _host_us(graphs, None, launches)
    goal = HIDDEN_HOST_SHARE * traced
    if traced <= 0 or _host_us(graphs, fitted, launches) <= goal:
        return fitted
    scale = _bisect(lambda x: _host_us(graphs, fitted.at(x), launches), fitted.per_event_scale, hi, goal)
    shorter = _at_scale(fitted, scale)  # keeps fitted's gap_scale
    if _host_us(graphs, shorter, launches) > goal * (1 + FIT_TOL):
        keep = _bisect(lambda k: _host_us(graphs, dataclasses.replace(shorter, gap_scale=fitted.gap_scale * (1.0 - k)),
                                          launches), 0.0, 1.0, goal)
        shorter = dataclasses.replace(shorter, gap_scale=fitted.gap_scale * (1.0 - keep))
    return shorter


def fit_to_bare(graphs: tuple[StepGraph, ...], base: ProfilerOverhead, launches: LaunchProfile | None,
                target_us: float) -> ProfilerOverhead:
    """The overhead that makes the median projected step equal `target_us` (the measured bare
    median): first its per-event scale (bisection over [0, MAX_SCALE × base]); when even that leaves
    the step too long and it holds bulk pageable device-to-host copies, the profiler stretched those
    (their GPU side waits for the CPU to drain each staged chunk, docs/model.md), and they run at one
    rate at least (d2h_gbps, bisection between the slowest and the fastest copy as traced: no copy
    faster than one of them ran under the profiler); when even that leaves
    it too long, the profiler also slowed the Python between recorded events, and the host gaps
    left after their events' cost shrink by one factor (gap_scale, bisection over [0, 1]); when even
    no per-event cost leaves it too short and `base` shrinks the gaps (gap_scale < 1), they shrink
    less (bisection over [base.gap_scale, 1]). Range of the scale ± BARE_SPREAD."""
    def median_at(o: ProfilerOverhead) -> float:
        return float(np.median(_spans(graphs, o, launches)))

    hi = MAX_SCALE * base.per_event_scale

    rates = d2h_rates(graphs)
    if rates is None:
        floor = median_at(dataclasses.replace(base.at(hi), gap_scale=0.0))
        if target_us < floor * (1 + FIT_TOL):
            return _gpu_floor_fit(median_at, base, hi, floor, graphs, launches)
    scale = _bisect(lambda x: median_at(base.at(x)), 0.0, hi, target_us)
    fitted = _at_scale(base, scale)
    if scale >= hi and rates is not None and median_at(fitted) > target_us:
        # the per-event cost cannot explain it and the step copies to pageable memory: the copies
        # were stretched, at the base's per-event cost (raised again only if the copies at their
        # fastest rate still leave the step too long)
        fitted = _at_scale(base, base.per_event_scale)
        gbps = _bisect(lambda x: median_at(dataclasses.replace(fitted, d2h_gbps=x)), *rates, target_us)
        fitted = dataclasses.replace(fitted, d2h_gbps=gbps)
        if median_at(fitted) > target_us * (1 + FIT_TOL):
            scale = _bisect(lambda x: median_at(fitted.at(x)), base.per_event_scale, hi, target_us)
            fitted = _at_scale(fitted, scale)
    if scale >= hi and median_at(fitted) > target_us * (1 + (FIT_TOL if fitted.d2h_gbps is not None else 0.0)):
        keep = _bisect(lambda k: median_at(dataclasses.replace(fitted, gap_scale=1.0 - k)), 0.0, 1.0, target_us)
        fitted = dataclasses.replace(fitted, gap_scale=1.0 - keep)
    elif scale <= 0.0 and base.gap_scale < 1.0 and median_at(fitted) < target_us:
        # even no per-event cost leaves the step too short: base shrank the host gaps more than this
        # recording's profiler slowed them; they shrink less (gap_scale up towards 1)
        lift = _bisect(lambda k: median_at(dataclasses.replace(fitted, gap_scale=1.0 - k)), 0.0,
                       1.0 - base.gap_scale, target_us)
        fitted = dataclasses.replace(fitted, gap_scale=1.0 - lift)
    return fitted


def _step_overheads(graphs: tuple[StepGraph, ...], numbers: list[int], base: ProfilerOverhead,
                    launches: LaunchProfile | None, bare: Mapping[int, float] | None,
                    measured: float | None) -> list[ProfilerOverhead]:
    """The overhead each step is projected with: fitted to its own bare step when every step was
    timed, the bare steps agree within STEP_SPREAD (else a step's own bare time is the unprofiled
    run's noise, not this step's) and each fit reaches its step's time within STEP_FIT (the profiler's cost changes from step
    to step of one recording, the unprofiled step much less: H200 held-out encoder_requests, traced
    103–207 ms a step, bare 57.4–57.9 ms); else one fit of the median step to the bare median for all
    (fit_to_bare: a window that ends with GPU work the bare clock splits differently cannot be fitted
    alone, train_sync_fixed's 2.4 ms windows against 9.2 ms bare steps); `base` without bare steps."""
    if measured is None or bare is None:
        return [base] * len(graphs)
    timed = [bare[n] for n in numbers if n in bare]
    if len(timed) == len(numbers) and max(timed) <= STEP_SPREAD * min(timed):
        own = [fit_to_bare((g,), base, launches, bare[n]) for g, n in zip(graphs, numbers, strict=True)]
        spans = [_spans((g,), o, launches)[0] for g, o in zip(graphs, own, strict=True)]
        if all(abs(span - bare[n]) <= STEP_FIT * bare[n] for span, n in zip(spans, numbers, strict=True)):
            return own
    return [fit_to_bare(graphs, base, launches, measured)] * len(graphs)


def _abstaining(rank: int, gate: Fidelity, traced: LaunchTotals, overhead: ProfilerOverhead,
                measured: float | None, spread: tuple[float, float]) -> RankModel:
    unprofiled = Unprofiled(traced=traced, projected=traced, low=traced, high=traced, trusted_ranks=0,
                            abstained=((rank, gate.reason),), measured_step_us=measured or 0.0,
                            measured_ranks=int(measured is not None), source=overhead.source,
                            measured_low_us=spread[0], measured_high_us=spread[1])
    return RankModel(rank=rank, fidelity=gate, overhead=overhead, launches=None, steps=(), unprofiled=unprofiled)


def rank_model(rank: RankTrace, lo: LaunchOverhead, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
               bare: Mapping[int, float] | None = None) -> RankModel:
    """The model of one rank over the steps `lo.plan` selects. `bare`: unprofiled step times by step
    number (the trace's tracekit profile run); when they cover a selected step they calibrate the
    per-event cost (fit_to_bare) instead of `overhead`'s scale."""
    plan = lo.plan
    selected = np.flatnonzero(plan.selected)
    traced_steps = [lo.step_totals[int(k)] for k in selected]
    traced = sum(traced_steps, LaunchTotals())
    numbers = [int(plan.windows.numbers[int(k)]) for k in selected]
    measured_steps = [bare[n] for n in numbers if bare is not None and n in bare]
    measured = float(np.median(measured_steps)) if measured_steps else None
    spread = (min(measured_steps), max(measured_steps)) if measured_steps else (0.0, 0.0)
    graphs, gate = gated_graphs(rank, plan)
    if not gate.trusted or len(graphs) != len(traced_steps):
        return _abstaining(int(rank.rank), gate, traced, overhead, measured, spread)
    launches = launch_profile(graphs)
    per_step = _step_overheads(graphs, numbers, overhead, launches, bare, measured)
    if measured is not None:  # the rank's: the median step's
        overhead = per_step[int(np.argsort([o.per_event_scale for o in per_step])[len(per_step) // 2])]
    steps: list[StepModel] = []
    projected: list[LaunchTotals] = []
    low: list[LaunchTotals] = []
    high: list[LaunchTotals] = []
    for graph, t, step_o in zip(graphs, traced_steps, per_step, strict=True):
        low_o, high_o = step_o.at(step_o.scale_range[1]), step_o.at(step_o.scale_range[0])
        costs = projected_costs(graph, step_o, launches)
        result = replay(graph, costs)
        new_dur = costs.call_dur_us if costs.call_dur_us is not None else graph.call_dur_us
        launch_us = max(t.cpu_launch_us - (_launch_time(graph, graph.call_dur_us) - _launch_time(graph, new_dur)), 0.0)
        busy = result.gpu_busy_us
        shrunk = 0.0 if costs.gpu_dur_us is None else float((graph.gpu_dur_us - costs.gpu_dur_us).sum())
        projected.append(shrink_idle(t, result.span_us, busy, launch_us, shrunk))
        for end, into in ((low_o, low), (high_o, high)):
            span = replay(graph, projected_costs(graph, end, launches), critical_path=False).span_us
            into.append(shrink_idle(t, span, busy, launch_us, shrunk))
        steps.append(StepModel(graph=graph, costs=costs, projected=result, traced=t))
    unprofiled = Unprofiled(
        traced=traced, projected=sum(projected, LaunchTotals()), low=sum(low, LaunchTotals()),
        high=sum(high, LaunchTotals()), trusted_ranks=1, measured_step_us=measured or 0.0,
        measured_ranks=int(measured is not None), source=overhead.source,
        per_event_us=float(np.mean([o.per_event_us(launches) for o in per_step])), replay_error=gate.median_error,
        measured_low_us=spread[0], measured_high_us=spread[1],
        d2h_gbps=min((o.d2h_gbps for o in per_step if o.d2h_gbps is not None), default=0.0))
    return RankModel(rank=int(rank.rank), fidelity=gate, overhead=overhead, launches=launches, steps=tuple(steps),
                     unprofiled=unprofiled)

