"""Cross-rank view over compact rank digests: per-step skew, collective waits, stragglers and their cause."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.analyzers.kernels import COMMUNICATION
from tracekit.analyzers.rank_digest import HOST_COMPONENTS, RankDigest, StepDigest
from tracekit.units import fmt_us

STRAGGLER_MIN_STEPS_PCT = 50.0  # a straggler arrives last in more than this share of the steps
STRAGGLER_MAX_CHANCE = 0.05  # ... more often than chance: P(a rank is last that often at random) < 5 %
STRAGGLER_MIN_LATE_US = 100.0  # ... by at least this much (µs) on average
STRAGGLER_MIN_LATE_SHARE = 0.02  # ... and at least this share of the median step span
CAUSE_MIN_SHARE = 0.5  # a component explains the lateness when its excess is >= half of it
# component -> (cause key, how the sentence names it)
COMPONENTS: dict[str, tuple[str, str]] = {
    "dataloader_us": ("data_loading", "its DataLoader takes"),
    "sync_us": ("sync", "its synchronising calls take"),
    "cpu_launch_us": ("launch", "its CPU launch calls take"),
    "cpu_ops_us": ("cpu_work", "its CPU ops (dispatch, CPU compute) take"),
}


@dataclass(frozen=True)
class RankStep:
    """One compared step of one rank (µs)."""

    rank: int
    step: int
    span_us: float
    gpu_busy_us: float
    exposed_comm_us: float
    wait_us: float  # time its collectives waited for the last rank to arrive


@dataclass(frozen=True)
class StepSkew:
    """One step across ranks: step time spread and collective start spread (µs)."""

    step: int
    span_min_us: float
    span_median_us: float
    span_max_us: float
    slowest_rank: int
    collectives: int  # collectives matched on every rank
    start_spread_median_us: float | None  # over those collectives: latest start - earliest start
    start_spread_max_us: float | None
    late_rank: int | None  # the rank the others waited for most in this step
    wait_us: float  # summed over ranks


@dataclass(frozen=True)
class Straggler:
    """A rank that arrives last at the collectives in most steps, and what makes it late."""

    rank: int
    late_steps_pct: float
    chance: float  # probability of being last in that many steps by chance (each step: 1 / ranks)
    late_us_per_step: float  # how late it arrives (vs the median other rank), mean over its late steps
    others_wait_us_per_step: float  # the others' waiting for it, summed over ranks, per compared step
    cause: str | None  # 'data_loading' | 'sync' | 'launch' | 'gpu:<class>' | None (not explained)
    evidence: str
    verdict: str
    median_verdict: str
    components: dict[str, tuple[float, float]]  # component -> (this rank, median rank) µs per step

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "late_steps_pct": self.late_steps_pct, "chance": self.chance,
                "late_us_per_step": self.late_us_per_step,
                "others_wait_us_per_step": self.others_wait_us_per_step, "cause": self.cause,
                "evidence": self.evidence, "verdict": self.verdict, "median_verdict": self.median_verdict,
                "components": {k: {"rank_us": a, "median_us": b} for k, (a, b) in self.components.items()}}


@dataclass(frozen=True)
class CrossRank:
    """The cross-rank view of a multi-rank run; `to_dict()` adds keys to `analyze --json`."""

    ranks: tuple[int, ...]
    steps: tuple[int, ...]  # the steps compared (present, and steady, on every rank)
    rank_steps: tuple[RankStep, ...]
    skew: tuple[StepSkew, ...]
    stragglers: tuple[Straggler, ...]
    verdicts: tuple[tuple[str, tuple[int, ...]], ...]  # (verdict, ranks), most ranks first
    span_us: float  # compared steps' spans summed over ranks (rank-µs)
    wait_us: float  # collective waiting summed over ranks and compared steps (rank-µs)
    late_steps: tuple[tuple[int, int], ...] = ()  # (rank, steps in which it was the late rank)

    def to_dict(self) -> dict[str, Any]:
        return {
            "skew": [vars(s) for s in self.skew],
            "late_steps": [{"rank": r, "steps": k} for r, k in self.late_steps],
            "stragglers": [s.to_dict() for s in self.stragglers],
            "rank_steps": [vars(s) for s in self.rank_steps],
            "rank_verdicts": [{"verdict": v, "count": len(r), "ranks": list(r)} for v, r in self.verdicts],
        }


def _compared_steps(digests: Sequence[RankDigest]) -> list[int]:
    """Steps every rank has and calls steady (all common steps when none is steady everywhere)."""
    common = set.intersection(*({s.step for s in d.steps} for d in digests))
    steady = set.intersection(*({s.step for s in d.steps if s.phase == "steady"} for d in digests))
    chosen = steady & common or common
    numbered = {s for s in chosen if s >= 0}
    return sorted(numbered or chosen)


def _matched(digests: Sequence[RankDigest], steps: set[int]) -> dict[tuple[int, str, int], np.ndarray]:
    """(step, kind, n) -> array [rank position, (start, end)] for collectives found on every rank."""
    table: dict[tuple[int, str, int], list] = {}
    origin = min(d.origin_us for d in digests)
    for pos, d in enumerate(digests):
        shift = float(d.origin_us - origin)  # exact: integer µs, small
        for c in d.collectives:
            if c.step in steps:
                table.setdefault((c.step, c.kind, c.index), [None] * len(digests))[pos] = (shift + c.start,
                                                                                          shift + c.end)
    return {k: np.array(v, dtype=float) for k, v in table.items() if all(x is not None for x in v)}


def cross_rank(digests: Sequence[RankDigest]) -> CrossRank:
    """Compare ranks step by step: who arrives last at the matched collectives, who waits how long."""
    digests = sorted(digests, key=lambda d: d.rank)
    ranks = tuple(d.rank for d in digests)
    n = len(digests)
    steps = _compared_steps(digests)
    by_step = [{s.step: s for s in d.steps} for d in digests]
    matched = _matched(digests, set(steps))
    wait = {s: np.zeros(n) for s in steps}  # per step, per rank position: waited in collectives
    caused = {s: np.zeros(n) for s in steps}  # per step: others' waiting attributed to each rank
    late_by = {s: np.zeros(n) for s in steps}  # per step: how late each rank arrived (when last)
    spreads: dict[int, list[float]] = {s: [] for s in steps}
    for (step, _kind, _n), se in matched.items():
        start, dur = se[:, 0], se[:, 1] - se[:, 0]
        last = int(np.argmax(start))
        w = np.clip(start[last] - start, 0.0, np.maximum(dur, 0.0))
        wait[step] += w
        caused[step][last] += float(w.sum())
        others = np.delete(start, last)
        late_by[step][last] = max(late_by[step][last], float(start[last] - np.median(others)))
        spreads[step].append(float(start.max() - start.min()))
    rank_steps, skew = [], []
    late_rank: dict[int, int | None] = {}
    for s in steps:
        spans = np.array([by_step[i][s].span_us for i in range(n)])
        culprit = int(np.argmax(caused[s])) if caused[s].max() > 0 else None
        late_rank[s] = culprit
        sp = spreads[s]
        skew.append(StepSkew(step=s, span_min_us=float(spans.min()), span_median_us=float(np.median(spans)),
                             span_max_us=float(spans.max()), slowest_rank=ranks[int(np.argmax(spans))],
                             collectives=len(sp), start_spread_median_us=float(np.median(sp)) if sp else None,
                             start_spread_max_us=max(sp) if sp else None,
                             late_rank=ranks[culprit] if culprit is not None else None,
                             wait_us=float(wait[s].sum())))
        for i, d in enumerate(digests):
            st = by_step[i][s]
            rank_steps.append(RankStep(rank=d.rank, step=s, span_us=st.span_us, gpu_busy_us=st.gpu_busy_us,
                                       exposed_comm_us=st.exposed_comm_us, wait_us=float(wait[s][i])))
    with_coll = [s for s in steps if late_rank[s] is not None] if matched else []
    median_span = float(np.median([k.span_median_us for k in skew])) if skew else 0.0
    stragglers = []
    for i in range(n):
        mine = [s for s in with_coll if late_rank[s] == i]
        if not with_coll or not mine:
            continue
        pct = 100.0 * len(mine) / len(with_coll)
        late = float(np.mean([late_by[s][i] for s in mine]))
        chance = by_chance(len(mine), len(with_coll), n)
        if (pct <= STRAGGLER_MIN_STEPS_PCT or chance >= STRAGGLER_MAX_CHANCE
                or late < max(STRAGGLER_MIN_LATE_US, STRAGGLER_MIN_LATE_SHARE * median_span)):
            continue
        others_wait = float(sum(caused[s][i] for s in steps)) / len(steps)
        stragglers.append(_straggler(i, digests, by_step, steps, pct, chance, late, others_wait))
    stragglers.sort(key=lambda x: -x.others_wait_us_per_step)
    groups = Counter(d.verdict for d in digests)
    verdicts = tuple((v, tuple(d.rank for d in digests if d.verdict == v))
                     for v, _ in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))
    return CrossRank(ranks=ranks, steps=tuple(steps), rank_steps=tuple(rank_steps), skew=tuple(skew),
                     stragglers=tuple(stragglers), verdicts=verdicts,
                     span_us=float(sum(r.span_us for r in rank_steps)),
                     wait_us=float(sum(r.wait_us for r in rank_steps)),
                     late_steps=tuple((d.rank, sum(1 for s in with_coll if late_rank[s] == i))
                                      for i, d in enumerate(digests)))


def by_chance(k: int, n: int, ranks: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1 / ranks): how likely one rank is the late one in k of n steps
    if every rank were equally likely to be late in each step."""
    q = 1.0 / max(ranks, 1)
    return float(sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k, n + 1)))


def _component_means(st: Sequence[StepDigest]) -> dict[str, float]:
    """Mean per step of each host-side component and of GPU time per kernel class (not communication:
    that is where a rank waits, not why it is late)."""
    out = {c: float(np.mean([getattr(s, c) for s in st])) for c in HOST_COMPONENTS}
    classes = {c for s in st for c in s.class_us} - {COMMUNICATION}
    for c in sorted(classes):
        out[f"gpu:{c}"] = float(np.mean([s.class_us.get(c, 0.0) for s in st]))
    return out


def _straggler(i: int, digests: Sequence[RankDigest], by_step: list[dict[int, StepDigest]],
               steps: list[int], pct: float, chance: float, late: float, others_wait: float) -> Straggler:
    """The straggler's components against the median rank (per component, the median over the other ranks)."""
    means = [_component_means([by_step[j][s] for s in steps]) for j in range(len(digests))]
    keys = sorted(set().union(*means))
    mine = {k: means[i].get(k, 0.0) for k in keys}
    others = [m for j, m in enumerate(means) if j != i]
    median = {k: float(np.median([m.get(k, 0.0) for m in others])) for k in keys}
    excess = {k: mine[k] - median[k] for k in keys}
    top = max(keys, key=lambda k: excess[k]) if keys else None
    d = digests[i]
    head = f"rank {d.rank} is late in {pct:.0f} % of steps by {fmt_us(late)}"
    cause = None
    if top is not None and excess[top] >= CAUSE_MIN_SHARE * late:
        if top in COMPONENTS:
            cause, words = COMPONENTS[top]
        else:
            cause, words = top, f"its {top.removeprefix('gpu:')} kernels take"
        evidence = (f"{head}: {words} {fmt_us(excess[top])} longer per step than the median rank's "
                    f"({fmt_us(mine[top])} vs {fmt_us(median[top])})")
    else:
        what = f"; largest difference: {top} +{fmt_us(excess[top])} per step" if top is not None else ""
        evidence = f"{head}: no host-side or kernel component explains it{what}"
    verdicts = sorted(x.verdict for x in digests if x.rank != digests[i].rank)
    shown = {k: (mine[k], median[k]) for k in keys if k in COMPONENTS or k == top}
    return Straggler(rank=d.rank, late_steps_pct=pct, chance=chance, late_us_per_step=late, others_wait_us_per_step=others_wait,
                     cause=cause, evidence=evidence, verdict=d.verdict,
                     median_verdict=verdicts[(len(verdicts) - 1) // 2], components=shown)
