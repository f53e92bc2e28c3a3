"""The cross-rank section of a multi-rank report: stragglers, waiting, skew, verdicts, as formatted strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tracekit.report.palette import VERDICTS
from tracekit.report.suggest_view import SuggestionView, suggestion_views
from tracekit.units import fmt_pct, fmt_time, plural

if TYPE_CHECKING:
    from tracekit.analyzers.ranks import CrossRank, RankStep
    from tracekit.suggestions.model import Suggestion

MAX_SKEW_ROWS = 40
CAUSE_LABEL = {"data_loading": "DataLoader", "sync": "host syncs", "launch": "CPU launch overhead",
               "cpu_work": "CPU ops"}


@dataclass(frozen=True)
class StragglerRow:
    rank: int
    anchor: str
    late_steps: str
    late_by: str
    others_wait: str
    cause: str
    evidence: str
    verdict: str


@dataclass(frozen=True)
class VerdictGroup:
    label: str
    css: str
    count: int
    ranks: tuple[tuple[int, str], ...]  # (rank, anchor)


@dataclass(frozen=True)
class RankWaitRow:
    """One rank, mean per compared step."""

    rank: int
    anchor: str
    span: str
    gpu_busy: str
    exposed_comm: str
    wait: str
    wait_w: float  # bar width, % of the largest wait


@dataclass(frozen=True)
class SkewRow:
    step: int
    span_min: str
    span_median: str
    span_max: str
    slowest: int
    collectives: int
    spread: str
    late: str
    wait: str


@dataclass(frozen=True)
class CrossRankView:
    """Everything the cross-rank partial shows, already formatted."""

    sentence: str
    steps_note: str
    stragglers: tuple[StragglerRow, ...]
    verdicts: tuple[VerdictGroup, ...]
    ranks: tuple[RankWaitRow, ...]
    skew: tuple[SkewRow, ...]
    more_skew: int
    suggestions: tuple[SuggestionView, ...]


def cross_rank_view(cross: CrossRank | None, suggestions: Sequence[Suggestion]) -> CrossRankView | None:
    """The view of a cross-rank comparison (None without one) and of the cross-rank rules' suggestions."""
    if cross is None:
        return None
    waits = [r for r in cross.rank_steps]
    by_rank: dict[int, list[RankStep]] = {}
    for r in waits:
        by_rank.setdefault(r.rank, []).append(r)
    top_wait = max((float(np.mean([x.wait_us for x in rows])) for rows in by_rank.values()), default=0.0) or 1.0
    ranks = tuple(RankWaitRow(
        rank=k, anchor=f"r{k}", span=fmt_time(np.mean([x.span_us for x in v])),
        gpu_busy=fmt_time(np.mean([x.gpu_busy_us for x in v])),
        exposed_comm=fmt_time(np.mean([x.exposed_comm_us for x in v])),
        wait=fmt_time(np.mean([x.wait_us for x in v])),
        wait_w=round(100 * float(np.mean([x.wait_us for x in v])) / top_wait, 2)) for k, v in sorted(by_rank.items()))
    stragglers = tuple(StragglerRow(
        rank=s.rank, anchor=f"r{s.rank}", late_steps=f"{s.late_steps_pct:.0f} %", late_by=fmt_time(s.late_us_per_step),
        others_wait=fmt_time(s.others_wait_us_per_step), cause=_cause(s.cause), evidence=s.evidence,
        verdict=f"{VERDICTS.get(s.verdict, ('', s.verdict))[1]} (median rank: "
                f"{VERDICTS.get(s.median_verdict, ('', s.median_verdict))[1]})")
        for s in cross.stragglers)
    verdicts = tuple(VerdictGroup(label=VERDICTS.get(v, ("neutral", v))[1], css=VERDICTS.get(v, ("neutral", v))[0],
                                  count=len(rs), ranks=tuple((r, f"r{r}") for r in rs)) for v, rs in cross.verdicts)
    skew = tuple(SkewRow(
        step=k.step, span_min=fmt_time(k.span_min_us), span_median=fmt_time(k.span_median_us),
        span_max=fmt_time(k.span_max_us), slowest=k.slowest_rank, collectives=k.collectives,
        spread=fmt_time(k.start_spread_max_us) if k.start_spread_max_us is not None else "–",
        late=str(k.late_rank) if k.late_rank is not None else "–", wait=fmt_time(k.wait_us))
        for k in cross.skew[:MAX_SKEW_ROWS])
    n = len(cross.ranks)
    if cross.stragglers:
        s = cross.stragglers[0]
        share = fmt_pct(s.others_wait_us_per_step * len(cross.steps) / cross.span_us) if cross.span_us else "–"
        sentence = (f"{s.evidence[0].upper()}{s.evidence[1:]}. The other ranks wait {fmt_time(s.others_wait_us_per_step)} "
                    f"per step for it at the collectives ({share} of the {n} ranks' time).")
    elif not any(k.collectives for k in cross.skew):
        sentence = f"No collective matched on all {n} ranks: nothing to say about who waits for whom."
    else:
        counts = sorted(cross.late_steps, key=lambda x: -x[1])
        top = (f" (most often last: rank {counts[0][0]}, in {counts[0][1]} of {len(cross.steps)} steps)"
               if counts and counts[0][1] else "")
        sentence = (f"No straggler: no rank arrives last at the collectives in most steps more often than "
                    f"chance would{top}; the ranks wait "
                    f"{fmt_time(cross.wait_us / max(len(cross.steps), 1) / n)} per step on average.")
    note = f"{plural(len(cross.steps), 'step')} compared (present and steady on every rank)"
    return CrossRankView(sentence=sentence, steps_note=note, stragglers=stragglers, verdicts=verdicts,
                         ranks=ranks, skew=skew, more_skew=max(len(cross.skew) - MAX_SKEW_ROWS, 0),
                         suggestions=tuple(suggestion_views(suggestions)))


def _cause(cause: str | None) -> str:
    if cause is None:
        return "not explained"
    if cause.startswith("gpu:"):
        return f"{cause[4:]} kernels"
    return CAUSE_LABEL.get(cause, cause)
