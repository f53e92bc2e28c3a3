"""The steady steps without the profiler, as tracekit.model projects them: additive totals, the verdict and how close it is to flipping."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from tracekit.analyzers.totals import (
    CAUSE_VERDICT,
    CPU_ONLY,
    GPU_BOUND,
    GPU_BOUND_SHARE,
    HOST_BOUND,
    LAUNCH_BOUND,
    LaunchTotals,
    bottleneck,
)
from tracekit.jsonsafe import plain

# A verdict whose GPU compute share is within this of GPU_BOUND_SHARE, or that another end of the
# projection's range would change, is said to be near that other verdict.
NEAR_BAND = 0.05
# The measured unprofiled steps vary more than this (slowest / fastest steady step) on a machine whose
# CPU speed changes under the run: on the H200 used for validation, train_tokenize.py's bare steps
# went from 33 to 64 ms within one run (docs/model.md, "The machine's own noise").
NOISY_MEASUREMENT = 1.25
# CPU-side causes: the profiler's cost sits in their time (the others are GPU or copy/comm time).
CPU_SIDE = ("launch_gap_us", "cpu_wait_us", "data_wait_us")

SOURCE_WORDS = {
    "default": "default profiler overhead (docs/model.md)",
    "bare": "the trace's own unprofiled step times (tracekit profile)",
    "calibration": "tracekit calibrate",
}


def shrink_idle(traced: LaunchTotals, span_us: float, gpu_busy_us: float, cpu_launch_us: float,
                copy_removed_us: float = 0.0) -> LaunchTotals:
    """`traced` (one step or a sum of steps) with its span, GPU busy time and launch-call time as
    projected: the GPU idle time the projection removes comes out of the CPU-side causes (launch
    gaps, CPU work, DataLoader waits) in proportion to their size, never below 0; sync, copy and
    communication time are kept (the profiler does not lengthen them), but the pageable copies'
    GPU time loses `copy_removed_us` (a bare timing showed the profiler stretched them)."""
    removed = max((traced.span_us - traced.gpu_busy_us) - max(span_us - gpu_busy_us, 0.0), 0.0)
    cpu_side = sum(getattr(traced, name) for name in CPU_SIDE)
    keep = max(1.0 - removed / cpu_side, 0.0) if cpu_side > 0 else 1.0
    # idle the CPU side cannot give back comes out of the GPU-side gaps, then the other waits, so
    # that the parts never add up to more than the projected span (LaunchTotals.parts)
    excess, rest = max(removed - cpu_side, 0.0), {}
    for name in ("gpu_gap_us", "unexplained_us", "sync_wait_us", "copy_wait_us"):
        take = min(excess, getattr(traced, name))
        rest[name], excess = getattr(traced, name) - take, excess - take
    return replace(traced, span_us=span_us, gpu_busy_us=gpu_busy_us, cpu_launch_us=cpu_launch_us,
                   launch_gap_us=traced.launch_gap_us * keep, cpu_wait_us=traced.cpu_wait_us * keep,
                   data_wait_us=traced.data_wait_us * keep, host_wait_us=max(traced.host_wait_us - removed, 0.0),
                   pageable_copy_us=max(traced.pageable_copy_us - copy_removed_us, 0.0), **rest)


def headline_totals(traced: LaunchTotals, unprofiled: Unprofiled | None, undetermined: str = "") -> LaunchTotals:
    """The totals a verdict reads: the projected unprofiled ones where the model projects, else
    `traced`; carrying `undetermined` (the integrity audit's reason the trace cannot support a
    verdict, tracekit.analyzers.integrity) when it is given."""
    totals = unprofiled.projected if unprofiled is not None and unprofiled.trusted else traced
    return replace(totals, undetermined=undetermined) if undetermined else totals


def compute_share(t: LaunchTotals) -> float:
    """The GPU's own share of the span (LaunchTotals.compute_us / span_us; 1 for an empty span)."""
    return min(t.compute_us / t.span_us, 1.0) if t.span_us > 0 else 1.0


@dataclass(frozen=True)
class Unprofiled:
    """One or more ranks' steady steps as traced and as projected without the profiler.

    `traced` / `projected` / `low` / `high` add up over steps and ranks like LaunchTotals (`low`
    and `high`: the projection with the most and the least profiler cost removed, the range of its
    constants). Ranks where the model abstains keep their traced totals in all four and are listed
    in `abstained` with the model's one-line reason. `measured_step_us`: the median unprofiled
    step the trace itself carries (tracekit profile's bare run), summed over the ranks that have
    one (`measured_ranks`); `measured_low_us` / `measured_high_us` the fastest and slowest of those
    steady steps, summed the same way. `source`: where the profiler's cost came from (SOURCE_WORDS);
    `per_event_us`: the cost per recorded CPU event removed (rank mean); `d2h_gbps`: the rate
    bulk pageable device-to-host copies were projected at, at least (0: as traced; the slowest rank's)."""

    traced: LaunchTotals
    projected: LaunchTotals
    low: LaunchTotals
    high: LaunchTotals
    trusted_ranks: int
    abstained: tuple[tuple[int, str], ...] = ()
    measured_step_us: float = 0.0
    measured_ranks: int = 0
    source: str = "default"
    per_event_us: float = 0.0
    replay_error: float = 0.0  # the trust gate's median replay error, the worst trusted rank's
    measured_low_us: float = 0.0
    measured_high_us: float = 0.0
    d2h_gbps: float = 0.0

    def __add__(self, other: Unprofiled) -> Unprofiled:
        return Unprofiled(
            traced=self.traced + other.traced, projected=self.projected + other.projected,
            low=self.low + other.low, high=self.high + other.high,
            trusted_ranks=self.trusted_ranks + other.trusted_ranks, abstained=self.abstained + other.abstained,
            measured_step_us=self.measured_step_us + other.measured_step_us,
            measured_ranks=self.measured_ranks + other.measured_ranks,
            source=self.source if self.source == other.source else "mixed",
            per_event_us=_mean(self.per_event_us, self.trusted_ranks, other.per_event_us, other.trusted_ranks),
            replay_error=max(self.replay_error, other.replay_error),
            measured_low_us=self.measured_low_us + other.measured_low_us,
            measured_high_us=self.measured_high_us + other.measured_high_us,
            d2h_gbps=min((x for x in (self.d2h_gbps, other.d2h_gbps) if x > 0), default=0.0))

    @property
    def trusted(self) -> bool:
        """The model projects at least one rank."""
        return self.trusted_ranks > 0

    @property
    def verdict(self) -> str:
        return bottleneck(self.projected)[0]

    @property
    def cause(self) -> str | None:
        return bottleneck(self.projected)[1]

    @property
    def evidence(self) -> str:
        return self.projected.evidence

    @property
    def step_us(self) -> float | None:
        """The projected step (mean over the steps and ranks)."""
        return self.projected.span_us / self.projected.steps if self.projected.steps else None

    @property
    def traced_step_us(self) -> float | None:
        return self.traced.span_us / self.traced.steps if self.traced.steps else None

    @property
    def measured_us(self) -> float | None:
        """The measured unprofiled step (mean of the ranks' medians), when the trace carries one."""
        return self.measured_step_us / self.measured_ranks if self.measured_ranks else None

    @property
    def measured_range_us(self) -> tuple[float, float] | None:
        """The fastest and slowest measured steady step (mean over the ranks), when there are any."""
        if not self.measured_ranks or self.measured_low_us <= 0:
            return None
        return self.measured_low_us / self.measured_ranks, self.measured_high_us / self.measured_ranks

    @property
    def measured_noisy(self) -> bool:
        """The measured steps spread by more than NOISY_MEASUREMENT: the unprofiled run's own speed
        changed, so a projection or a diff against it is as uncertain as that spread."""
        r = self.measured_range_us
        return r is not None and r[1] > NOISY_MEASUREMENT * r[0]

    @property
    def share(self) -> float:
        """The GPU's own share of the projected span."""
        return compute_share(self.projected)

    @property
    def near(self) -> str | None:
        """The verdict the step is close to, when it is close to one: within NEAR_BAND of the
        gpu-bound threshold, or another verdict at one end of the projection's range."""
        verdict = self.verdict
        if verdict == CPU_ONLY:
            return None
        for end in (self.low, self.high):
            other = bottleneck(end)[0]
            if other != verdict:
                return other
        if abs(self.share - GPU_BOUND_SHARE) > NEAR_BAND:
            return None
        if verdict != GPU_BOUND:
            return GPU_BOUND
        cause = max(_cpu_causes(self.projected).items(), key=lambda kv: kv[1])[0]
        return CAUSE_VERDICT.get(cause, HOST_BOUND) if cause else LAUNCH_BOUND

    @property
    def source_words(self) -> str:
        return SOURCE_WORDS.get(self.source, self.source)

    @property
    def label(self) -> str:
        """'gpu-bound, GPU 84 % — near launch-bound' (the share is the GPU's own, of the projected step)."""
        text = f"{self.verdict}, GPU {100 * self.share:.0f} %"
        near = self.near
        return f"{text} — near {near}" if near else text

    def to_dict(self) -> dict[str, Any]:
        """The document's `unprofiled` object (schema tracekit.analysis/2)."""
        n = max(self.projected.steps, 1)
        return plain({
            "trusted": self.trusted, "trusted_ranks": self.trusted_ranks,
            "abstained": [{"rank": r, "reason": why} for r, why in self.abstained],
            "verdict": self.verdict, "cause": self.cause, "near": self.near, "gpu_share": self.share,
            "evidence": self.evidence,
            "traced_step_us": self.traced_step_us, "projected_step_us": self.step_us,
            "projected_low_us": self.low.span_us / n, "projected_high_us": self.high.span_us / n,
            "measured_step_us": self.measured_us,
            "measured_low_us": (self.measured_range_us or (None, None))[0],
            "measured_high_us": (self.measured_range_us or (None, None))[1],
            "measured_noisy": self.measured_noisy,
            "traced_gpu_busy_share": self.traced.gpu_util, "projected_gpu_busy_share": self.projected.gpu_util,
            "correction_us": (self.traced.span_us - self.projected.span_us) / n,
            "source": self.source, "source_words": SOURCE_WORDS.get(self.source, self.source),
            "per_event_us": self.per_event_us, "replay_error": self.replay_error,
            "totals": {f.name: getattr(self.projected, f.name) for f in fields(LaunchTotals)},
        })


def _cpu_causes(t: LaunchTotals) -> dict[str, float]:
    causes = t.causes()
    return {k: v for k, v in causes.items() if v > 0} or {"launch": 0.0}


def _mean(a: float, na: int, b: float, nb: int) -> float:
    return (a * na + b * nb) / (na + nb) if na + nb else 0.0


def combine_unprofiled(parts: Sequence[Unprofiled | None]) -> Unprofiled | None:
    """The parts added up; None when none is given."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    total = given[0]
    for p in given[1:]:
        total = total + p
    return total
