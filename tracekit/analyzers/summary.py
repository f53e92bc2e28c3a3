"""What one or more ranks' analyses add up to: the typed body of the `analyze --json` document.

A rank's `AnalysisSummary` holds nothing proportional to the events; summaries combine with `+` /
`combine()` (totals and times add, kernel rows regroup, queue sketches merge); `to_dict()` writes the JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.devices import Device
from tracekit.analyzers.gputime import TemporalBreakdown
from tracekit.analyzers.graphs import GraphReplays
from tracekit.analyzers.integrity import Integrity, combine_integrity
from tracekit.analyzers.kernels import (
    CLASS,
    LIBRARY,
    OTHER,
    SUM_COUNT,
    SUM_KEY,
    SUM_SHARE,
    SUM_TIME,
    summarize,
)
from tracekit.analyzers.launch import A_DUR, A_QUEUE_US, LaunchTotals, QueueStats, steady_mask
from tracekit.analyzers.per_step import per_step
from tracekit.analyzers.rank_views import RankViews, views_dict
from tracekit.analyzers.roofline import ESTIMATED, flagged, kernel_records, roofline_rows
from tracekit.analyzers.steady import StepPhase
from tracekit.analyzers.unprofiled import Unprofiled, combine_unprofiled, headline_totals
from tracekit.jsonsafe import plain, records

if TYPE_CHECKING:
    from tracekit.analyzers.analysis import Analysis, RankAnalysis

SCHEMA = "tracekit.analysis/2"  # /2: the `unprofiled` projection; verdict, cause and evidence from it

# Columns of the kernel rows (the JSON `kernels` rows), in output order.
KERNEL_COLUMNS: tuple[str, ...] = (
    "name", "class", "library", "op", "shapes", "dtype", "count", "time_us", "flops", "bytes",
    "intensity", "achieved_tflops", "achieved_gbps", "bound", "roofline_pct",
)
_GROUP_KEYS = ["name", "class", "library", "op", "shapes", "dtype"]
_SUMMED = ["count", "time_us", "flops", "bytes"]
QUANTILES = np.linspace(0.0, 1.0, 1001)  # queue-delay sketch carried per rank: 0.1 % steps


def regroup_kernel_rows(both: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """Kernel rows of several ranks summed per (name, class, library, op, shapes, dtype), the roofline
    columns recomputed, largest time first; FLOPs/bytes unknown when any rank's row lacks them."""
    keys = both[_GROUP_KEYS].astype(object).where(both[_GROUP_KEYS].notna(), "\x00")
    by = [keys[k] for k in _GROUP_KEYS]
    summed = both[_SUMMED].groupby(by, sort=False).sum(min_count=1)
    unknown = both[["flops", "bytes"]].isna().groupby(by, sort=False).any()
    summed[["flops", "bytes"]] = summed[["flops", "bytes"]].mask(unknown)
    summed[ESTIMATED] = both[ESTIMATED].eq(True).groupby(by, sort=False).any() if ESTIMATED in both else False
    out = summed.reset_index()
    for k in _GROUP_KEYS:
        col = out[k].astype(object)
        out[k] = col.where(col != "\x00", None)
    out = roofline_rows(out, device)
    return sort_kernel_rows(out)


def sort_kernel_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows largest time first (ties by name), renumbered."""
    out = rows.sort_values(["time_us", "name"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)


def median_kernels(counts: Sequence[int]) -> float | None:
    """Median kernels per headline step (None without steps)."""
    return float(np.median(counts)) if len(counts) else None


def per_token(per_step: float | None, tokens_per_step: float | None) -> float | None:
    """Kernels per step / tokens per step (None unless both are known)."""
    if per_step is None or not tokens_per_step:
        return None
    return per_step / tokens_per_step


def headline_kernels(r: RankAnalysis) -> tuple[int, ...]:
    """Kernels of each headline step of one rank."""
    lo = r.launch
    selected = lo.selected or (True,) * len(lo.step_totals)
    return tuple(t.kernels for t, keep in zip(lo.step_totals, selected, strict=True) if keep)


@dataclass(frozen=True)
class QueueSummary:
    """Queue delays of one or more ranks: exact percentiles for one rank, from the ranks' quantile
    sketches (1,001 points each: exact at 0 % and 100 %, within 0.1 % of rank elsewhere) for several."""

    stats: QueueStats
    sketches: tuple[tuple[tuple[float, ...], int], ...]  # per rank: (quantiles at QUANTILES, count)

    @staticmethod
    def of(values: np.ndarray) -> QueueSummary:
        v = np.asarray(values, dtype=float)
        finite = v[np.isfinite(v)]
        sketch = (tuple(float(x) for x in np.quantile(finite, QUANTILES)), len(finite)) if len(finite) else ((), 0)
        return QueueSummary(QueueStats.of(v), (sketch,))

    @staticmethod
    def combine(parts: Sequence[QueueSummary]) -> QueueSummary:
        if len(parts) == 1:
            return parts[0]
        sketches = tuple(s for p in parts for s in p.sketches)
        return QueueSummary(merged_queue(sketches), sketches)


def merged_queue(sketches: Sequence[tuple[tuple[float, ...], int]]) -> QueueStats:
    """Queue-delay percentiles over several ranks from their sketches (each quantile point weighted
    by its rank's count / 1001)."""
    parts = [(np.asarray(q), n) for q, n in sketches if n]
    if not parts:
        return QueueStats.of(np.empty(0))
    values = np.concatenate([q for q, _ in parts])
    weights = np.concatenate([np.full(len(q), n / len(q)) for q, n in parts])
    order = np.argsort(values, kind="stable")
    values, cum = values[order], np.cumsum(weights[order])
    total = cum[-1]

    def pct(p: float) -> float:
        return float(values[min(np.searchsorted(cum, p * total), len(values) - 1)])

    return QueueStats(count=int(sum(n for _, n in parts)), p50_us=pct(0.5), p90_us=pct(0.9),
                      max_us=float(values.max()))


@dataclass(frozen=True)
class KeyRow:
    """Kernel time of one class or library over the headline steps."""

    key: str
    time_us: float
    count: int
    share: float  # of the kernel time of the rows it was summarised with


@dataclass(frozen=True)
class KeyTotals:
    """Time per class (or library), largest first; adds up over ranks (shares recomputed)."""

    rows: tuple[KeyRow, ...]

    @staticmethod
    def of_table(table: pd.DataFrame) -> KeyTotals:
        """From a kernels.summarize table (SUM_* columns)."""
        return KeyTotals(tuple(KeyRow(str(r[SUM_KEY]), float(r[SUM_TIME]), int(r[SUM_COUNT]), float(r[SUM_SHARE]))
                               for r in table.to_dict("records")))

    @staticmethod
    def combine(parts: Sequence[KeyTotals]) -> KeyTotals:
        if len(parts) == 1:
            return parts[0]
        time: dict[str, float] = {}
        count: dict[str, int] = {}
        for row in (r for p in parts for r in p.rows):
            time[row.key] = time.get(row.key, 0.0) + row.time_us
            count[row.key] = count.get(row.key, 0) + row.count
        total = sum(time.values()) or 1.0
        rows = sorted((KeyRow(k, t, count[k], t / total) for k, t in time.items()), key=lambda r: (-r.time_us, r.key))
        return KeyTotals(tuple(rows))

    def share(self, key: str) -> float:
        return next((r.share for r in self.rows if r.key == key), 0.0)

    def to_records(self, key_name: str) -> list[dict[str, Any]]:
        return [{key_name: r.key, "time_us": r.time_us, "count": r.count, "share": r.share} for r in self.rows]


@dataclass(frozen=True)
class StepRow:
    """One step of one rank: its totals, queue delay and phase."""

    rank: int
    step: int
    totals: LaunchTotals  # this step alone (steps=1)
    queue_p50_us: float | None
    queue_p90_us: float | None
    queue_max_us: float | None
    phase: str | None
    phase_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"rank": self.rank, "step": self.step, **self.totals.to_dict()}
        rec.update(queue_p50_us=plain(self.queue_p50_us), queue_p90_us=plain(self.queue_p90_us),
                   queue_max_us=plain(self.queue_max_us), phase=self.phase, phase_reason=self.phase_reason)
        rec.pop("steps", None)
        return rec


@dataclass(frozen=True)
class RankEntry:
    """One rank's line: scope, verdict, headline totals, HTA-style temporal breakdown, streams, APIs."""

    rank: int
    scope: str  # 'steps' | 'inferred' | 'trace' (tracekit.analyzers.launch)
    totals: LaunchTotals
    steady_steps: tuple[int, ...]
    other_share: float  # of all the rank's GPU time (not only the headline steps)
    temporal: TemporalBreakdown
    streams: pd.DataFrame  # launch.S_* columns
    apis: pd.DataFrame  # launch.API_* columns
    unprofiled: Unprofiled | None = None  # the rank's steady steps projected without the profiler

    @property
    def headline(self) -> LaunchTotals:
        """Projected totals when the model projects this rank, else the traced ones."""
        return headline_totals(self.totals, self.unprofiled)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "scope": self.scope, "verdict": self.headline.verdict, "cause": self.headline.cause,
                "traced_verdict": self.totals.verdict,
                "steady_steps": list(self.steady_steps), "gpu_busy_us": self.totals.gpu_busy_us,
                "span_us": self.totals.span_us, "kernels": self.totals.kernels, "other_share": self.other_share,
                "temporal": self.temporal.to_dict(), "streams": records(self.streams), "apis": records(self.apis)}


@dataclass(frozen=True)
class AnalysisSummary:
    """The analysis of one or more ranks, reduced to what the document and the renderers show."""

    path: str
    ranks: tuple[RankEntry, ...]
    device: Device | None
    totals: LaunchTotals  # the headline steps, summed over ranks (rank-µs)
    queue: QueueSummary
    classes: KeyTotals
    libraries: KeyTotals
    kernels: pd.DataFrame  # KERNEL_COLUMNS, largest time first
    steps: tuple[StepRow, ...]
    steady_steps: tuple[tuple[int, int], ...]  # (rank, step) of the headline steps
    excluded: tuple[tuple[int, StepPhase], ...]  # (rank, phase) of the steps left out
    graphs: tuple[GraphReplays, ...]
    headline_kernels: tuple[int, ...]  # kernels of each headline step, every rank
    steps_total: int
    tokens_per_step: float | None
    steps_mode: str
    warnings: tuple[str, ...]
    unprofiled: Unprofiled | None = None  # the ranks' projections without the profiler, added up
    integrity: Integrity | None = None  # the ranks' integrity audits (tracekit.analyzers.integrity)
    views: tuple[RankViews, ...] = ()  # each rank's memory view and operator groupings (rank_views.py)

    def __add__(self, other: AnalysisSummary) -> AnalysisSummary:
        return combine([self, other])

    @property
    def headline(self) -> LaunchTotals:
        """The totals the verdict reads: projected without the profiler where the model projects, else
        traced; `undetermined` when the integrity audit says the trace cannot support a verdict."""
        return headline_totals(self.totals, self.unprofiled, self.integrity.undetermined if self.integrity else "")

    @property
    def verdict(self) -> str:
        return self.headline.verdict

    @property
    def cause(self) -> str | None:
        return self.headline.cause

    @property
    def evidence(self) -> str:
        return self.headline.evidence

    @property
    def scope(self) -> str:
        scopes = sorted({r.scope for r in self.ranks})
        return scopes[0] if len(scopes) == 1 else "mixed"

    @property
    def other_share(self) -> float:
        return self.classes.share(OTHER)

    @property
    def kernels_per_step_median(self) -> float | None:
        return median_kernels(self.headline_kernels)

    @property
    def kernels_per_token(self) -> float | None:
        return per_token(self.kernels_per_step_median, self.tokens_per_step)

    def renumbered(self, rank: int) -> AnalysisSummary:
        """The same summary of one rank under another rank number (two files claimed one rank)."""
        return dataclasses.replace(
            self, ranks=tuple(dataclasses.replace(r, rank=rank) for r in self.ranks),
            steps=tuple(dataclasses.replace(s, rank=rank) for s in self.steps),
            steady_steps=tuple((rank, s) for _, s in self.steady_steps),
            excluded=tuple((rank, p) for _, p in self.excluded))

    def summary_dict(self) -> dict[str, Any]:
        q = self.queue.stats
        return {
            **self.totals.to_dict(), "scope": self.scope, "steps_mode": self.steps_mode,
            "steps_total": self.steps_total, "kernels_per_step_median": self.kernels_per_step_median,
            "tokens_per_step": self.tokens_per_step, "kernels_per_token": self.kernels_per_token,
            "queue_p50_us": q.p50_us, "queue_p90_us": q.p90_us, "queue_max_us": q.max_us,
            "other_share": self.other_share, "verdict": self.verdict, "cause": self.cause,
            "evidence": self.evidence, "traced_verdict": self.totals.verdict, "traced_cause": self.totals.cause,
            "traced_evidence": self.totals.evidence,
        }

    def per_step_dict(self) -> dict[str, float] | None:
        """The traced numbers per steady step, as the text and report show them (analyzers/per_step.py)."""
        return per_step(self.totals) if self.scope != "trace" else None

    def to_dict(self) -> dict[str, Any]:
        """The document's analysis keys (tracekit.analysis/1), in document order, JSON-safe."""
        doc: dict[str, Any] = plain({
            "schema": SCHEMA, "trace": self.path, "ranks": [r.to_dict() for r in self.ranks],
            "device": self.device.to_dict() if self.device is not None else None,
            "summary": self.summary_dict(), "per_step": self.per_step_dict(),
            "unprofiled": self.unprofiled.to_dict() if self.unprofiled is not None else None,
            "integrity": self.integrity.to_list() if self.integrity is not None else [],
            "steady_steps": [{"rank": r, "step": s} for r, s in self.steady_steps],
            "excluded_steps": [{"rank": r, **p.to_dict()} for r, p in self.excluded],
            "steps": [s.to_dict() for s in self.steps],
            "classes": self.classes.to_records("class"), "libraries": self.libraries.to_records("library"),
        })
        doc["kernels"] = kernel_records(self.kernels, KERNEL_COLUMNS, {"shapes": format_shapes})  # JSON-safe
        doc.update(plain({"graphs": [g.to_dict() for g in self.graphs], "warnings": list(self.warnings),
                          **views_dict(self.views)}))
        return doc


def combine(parts: Sequence[AnalysisSummary]) -> AnalysisSummary:
    """The summary of several ranks' summaries (in the given order); the path and options of the first."""
    if not parts:
        raise ValueError("combine() needs at least one summary")
    if len(parts) == 1:
        return parts[0]
    device = next((p.device for p in parts if p.device is not None), None)
    kernels = regroup_kernel_rows(pd.concat([p.kernels for p in parts], ignore_index=True), device)
    first = parts[0]
    return AnalysisSummary(
        path=first.path, ranks=tuple(r for p in parts for r in p.ranks), device=device,
        totals=sum((p.totals for p in parts), LaunchTotals()),
        queue=QueueSummary.combine([p.queue for p in parts]),
        classes=KeyTotals.combine([p.classes for p in parts]),
        libraries=KeyTotals.combine([p.libraries for p in parts]), kernels=kernels,
        steps=tuple(s for p in parts for s in p.steps),
        steady_steps=tuple(x for p in parts for x in p.steady_steps),
        excluded=tuple(x for p in parts for x in p.excluded), graphs=tuple(g for p in parts for g in p.graphs),
        headline_kernels=tuple(k for p in parts for k in p.headline_kernels),
        steps_total=sum(p.steps_total for p in parts), tokens_per_step=first.tokens_per_step,
        steps_mode=first.steps_mode, warnings=tuple(dict.fromkeys(w for p in parts for w in p.warnings)),
        unprofiled=combine_unprofiled([p.unprofiled for p in parts]),
        integrity=combine_integrity([p.integrity for p in parts]), views=tuple(v for p in parts for v in p.views))


def rank_summary(analysis: Analysis, r: RankAnalysis) -> AnalysisSummary:
    """One rank of `analysis` as a summary (its headline steps; the analysis's device and options)."""
    lo = r.launch
    mask = steady_mask(lo)
    if len(analysis.ranks) == 1:  # the analysis's own tables are this rank's
        classes, libraries = KeyTotals.of_table(analysis.classes), KeyTotals.of_table(analysis.libraries)
        kernels = analysis.kernels[flagged(analysis.kernels, KERNEL_COLUMNS)]
    else:
        table = r.classification.table
        dur = pd.Series(lo.activities[A_DUR].to_numpy(dtype=float)[mask])
        classes = KeyTotals.of_table(summarize(pd.Series(table[CLASS].to_numpy()[mask]), dur))
        libraries = KeyTotals.of_table(summarize(pd.Series(table[LIBRARY].to_numpy()[mask]), dur))
        kernels = sort_kernel_rows(r.roofline.table)[flagged(r.roofline.table, KERNEL_COLUMNS)]
    phases: Sequence[StepPhase | None] = lo.phases or (None,) * len(lo.step_totals)
    queue_cols = {k: lo.steps[k].tolist() for k in ("queue_p50_us", "queue_p90_us", "queue_max_us")}
    steps = tuple(
        StepRow(rank=r.rank, step=int(step), totals=totals, queue_p50_us=queue_cols["queue_p50_us"][i],
                queue_p90_us=queue_cols["queue_p90_us"][i], queue_max_us=queue_cols["queue_max_us"][i],
                phase=phase.phase if phase is not None else None,
                phase_reason=phase.reason if phase is not None else None)
        for i, (step, totals, phase) in enumerate(zip(lo.steps["step"].tolist(), lo.step_totals, phases, strict=True)))
    for totals in lo.step_totals:  # each step's sentence is written here, in the rank's worker
        _ = totals.evidence
    graphs = () if r.graphs is None else (dataclasses.replace(r.graphs, replayed=np.zeros(0, dtype=bool)),)
    return AnalysisSummary(
        path=analysis.path,
        ranks=(RankEntry(rank=r.rank, scope=lo.scope, totals=lo.totals, steady_steps=tuple(lo.steady_steps),
                         other_share=r.classification.other_share, temporal=r.temporal, streams=lo.streams,
                         apis=lo.apis, unprofiled=r.unprofiled),),
        device=analysis.device, totals=lo.totals,
        queue=QueueSummary.of(lo.activities[A_QUEUE_US].to_numpy()[mask]),
        classes=classes, libraries=libraries, kernels=kernels,
        steps=steps, steady_steps=tuple((r.rank, s) for s in lo.steady_steps),
        excluded=tuple((r.rank, p) for p in lo.excluded), graphs=graphs, headline_kernels=headline_kernels(r),
        steps_total=len(lo.step_totals), tokens_per_step=analysis.tokens_per_step,
        steps_mode=analysis.steps_mode, warnings=analysis.warnings, unprofiled=r.unprofiled, integrity=r.integrity,
        views=(RankViews(r.rank, r.memory, r.operators),))


def summarize_analysis(analysis: Analysis) -> AnalysisSummary:
    """The summary of every rank of `analysis`, added up."""
    return combine([rank_summary(analysis, r) for r in analysis.ranks])
