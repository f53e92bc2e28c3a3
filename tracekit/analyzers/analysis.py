"""The analysis of a trace: every analyzer on each rank (RankAnalysis), combined over the selected ranks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.attribution import KernelCosts, estimate_costs
from tracekit.analyzers.detectors.find_all import find_patterns
from tracekit.analyzers.detectors.patterns import Patterns
from tracekit.analyzers.devices import Device, match_device
from tracekit.analyzers.gputime import TemporalBreakdown, temporal_breakdown
from tracekit.analyzers.graphs import GraphReplays, graph_replays
from tracekit.analyzers.integrity import Integrity, audit, combine_integrity
from tracekit.analyzers.isolate import attempt, empty_patterns
from tracekit.analyzers.kernels import (
    CLASS,
    LIBRARY,
    OTHER,
    SUM_KEY,
    SUM_SHARE,
    KernelClassification,
    classify,
    summarize,
)
from tracekit.analyzers.launch import (
    LaunchOverhead,
    LaunchTotals,
    QueueStats,
    launch_overhead,
)
from tracekit.analyzers.memory import MemoryView, memory_view
from tracekit.analyzers.operators import OperatorView, operator_views
from tracekit.analyzers.roofline import Roofline, roofline
from tracekit.analyzers.steady import StepPhase
from tracekit.analyzers.step_plan import StepPlan, plan_steps
from tracekit.analyzers.step_selection import STEADY_STEPS, StepSelection
from tracekit.analyzers.summary import (
    headline_kernels,
    median_kernels,
    per_token,
    regroup_kernel_rows,
    sort_kernel_rows,
    summarize_analysis,
)
from tracekit.analyzers.timeline import Timeline, timeline
from tracekit.analyzers.tracefacts import TraceFacts, trace_facts
from tracekit.analyzers.unprofiled import Unprofiled, combine_unprofiled, headline_totals
from tracekit.trace.model import RankTrace, Trace


@dataclass(frozen=True)
class RankAnalysis:
    """Everything tracekit computes for one rank."""

    rank: int
    classification: KernelClassification
    launch: LaunchOverhead
    temporal: TemporalBreakdown
    costs: KernelCosts
    roofline: Roofline
    patterns: Patterns  # what the suggestion rules read
    graphs: GraphReplays | None = None  # CUDA/HIP graph replays and how their kernels got ops
    timeline: Timeline | None = None  # binned busy share per stream (None without GPU activity)
    facts: TraceFacts | None = None  # what the file says: platform, GPUs, versions, counts, CPU ops
    unprofiled: Unprofiled | None = None  # the steady steps projected without the profiler (tracekit.model)
    integrity: Integrity | None = None  # what the trace can support (run before the verdict)
    memory: MemoryView | None = None  # GPU memory per step (profile_memory traces only)
    operators: tuple[OperatorView, ...] = ()  # time by op, module and source line (analyzers/operators.py)
    failures: tuple[str, ...] = ()  # a part that a tracekit bug left out, one warning each (analyzers/isolate.py)


@dataclass(frozen=True)
class Analysis:
    """A trace's analysis over the selected ranks. `to_dict()` is its JSON; the `tracekit analyze
    --json` document adds the suggestions (tracekit.suggestions.analysis_document)."""

    path: str
    ranks: tuple[RankAnalysis, ...]
    device: Device | None  # None: the device is not in the peak table
    totals: LaunchTotals  # summed over the selected ranks
    queue: QueueStats  # over all ranks' launched GPU activities inside the steps
    classes: pd.DataFrame  # kernels.SUM_* columns, keyed by class, over the selected ranks
    libraries: pd.DataFrame  # kernels.SUM_* columns, keyed by library
    kernels: pd.DataFrame  # KERNEL_COLUMNS, largest time first
    tokens_per_step: float | None = None
    warnings: tuple[str, ...] = ()
    steps_mode: str = STEADY_STEPS.mode  # which steps the headline covers: steady, all or N-M

    @property
    def unprofiled(self) -> Unprofiled | None:
        """The ranks' projections added up (None until tracekit.model has run: `with_model`)."""
        return combine_unprofiled([r.unprofiled for r in self.ranks])

    @property
    def headline(self) -> LaunchTotals:
        """The totals the verdict reads: projected without the profiler where the model projects a
        rank, else as traced."""
        audit_ = self.integrity
        return headline_totals(self.totals, self.unprofiled, audit_.undetermined if audit_ is not None else "")

    @property
    def integrity(self) -> Integrity | None:
        """The ranks' integrity audits added up."""
        return combine_integrity([r.integrity for r in self.ranks])

    @property
    def verdict(self) -> str:
        return self.headline.verdict

    @property
    def cause(self) -> str | None:
        return self.headline.cause

    @property
    def evidence(self) -> str:
        return self.headline.evidence

    def with_model(self, unprofiled: dict[int, Unprofiled]) -> Analysis:
        """The same analysis with each rank's projection (by rank number) attached."""
        ranks = tuple(dataclasses.replace(r, unprofiled=unprofiled.get(r.rank, r.unprofiled)) for r in self.ranks)
        return dataclasses.replace(self, ranks=ranks)

    @property
    def all_totals(self) -> LaunchTotals:
        """Every step of every analysed rank (set-up, warm-up and partial ones included)."""
        return sum((r.launch.all_totals or r.launch.totals for r in self.ranks), LaunchTotals())

    @property
    def excluded(self) -> tuple[tuple[int, StepPhase], ...]:
        """(rank, phase) of every step left out of the headline."""
        return tuple((r.rank, p) for r in self.ranks for p in r.launch.excluded)

    @property
    def other_share(self) -> float:
        row = self.classes[self.classes[SUM_KEY] == OTHER]
        return float(row[SUM_SHARE].iloc[0]) if len(row) else 0.0

    @property
    def kernels_per_step_median(self) -> float | None:
        """Median kernels per step over all ranks' headline steps."""
        return median_kernels([k for r in self.ranks for k in headline_kernels(r)])

    @property
    def kernels_per_token(self) -> float | None:
        """Median kernels per step / tokens_per_step (None unless the caller gave tokens_per_step)."""
        return per_token(self.kernels_per_step_median, self.tokens_per_step)

    def summary_dict(self) -> dict[str, Any]:
        """The document's `summary` object (tracekit.analyzers.summary.AnalysisSummary.summary_dict)."""
        return summarize_analysis(self).summary_dict()

    def to_dict(self) -> dict[str, Any]:
        """The document's analysis keys: `summarize_analysis(self).to_dict()`."""
        return summarize_analysis(self).to_dict()


def _combine_rows(tables: list[pd.DataFrame], device: Device | None) -> pd.DataFrame:
    if len(tables) == 1:
        return sort_kernel_rows(tables[0])
    return regroup_kernel_rows(pd.concat(tables, ignore_index=True), device)


def _planned(rank: RankTrace, steps: StepSelection) -> tuple[StepPlan, KernelClassification, KernelCosts]:
    """What every analyzer of a rank starts from: its step plan, kernel classes and op costs."""
    plan = plan_steps(rank, steps)
    kc = classify(rank)
    return plan, kc, estimate_costs(rank, kc)


def rank_patterns(rank: RankTrace, steps: StepSelection = STEADY_STEPS) -> Patterns:
    """The patterns of one RankTrace alone, found as analyze_rank finds them (without the other analyzers)."""
    plan, kc, costs = _planned(rank, steps)
    return find_patterns(rank, kc, costs, plan=plan)


def analyze_rank(rank: RankTrace, *, device: Device | None = None, kernel_wait_us: float | None = None,
                 steps: StepSelection = STEADY_STEPS) -> RankAnalysis:
    """All analyzers on one RankTrace, after its step plan; the kernel rows and patterns cover the
    headline steps (those `steps` selects)."""
    plan, kc, costs = _planned(rank, steps)
    classes = kc.table[CLASS].to_numpy(dtype=object)
    options = {} if kernel_wait_us is None else {"kernel_wait_us": kernel_wait_us}
    lo = launch_overhead(rank, plan, classes=classes, **options)
    tb = temporal_breakdown(rank, kc.table[CLASS])
    roof = roofline(rank, kc, costs, device, plan)
    patterns, failed = attempt("the pattern detectors", lambda: find_patterns(rank, kc, costs, plan=plan),
                               lambda: empty_patterns(rank), f"rank {rank.rank} gets no suggestions")
    return RankAnalysis(rank=int(rank.rank), classification=kc, launch=lo, temporal=tb, costs=costs,
                        roofline=roof, patterns=patterns, graphs=graph_replays(rank, costs),
                        timeline=timeline(rank, plan, kc.table[CLASS]), facts=trace_facts(rank),
                        integrity=audit(rank, plan),
                        memory=memory_view(rank, plan), operators=operator_views(rank, plan, costs),
                        failures=(failed,) if failed else ())


def analyze(trace: Trace, *, rank: int | None = None, tokens_per_step: float | None = None,
            steps: StepSelection | str = STEADY_STEPS) -> Analysis:
    """Analyze every rank of `trace` (or only `rank`) and combine the results. `steps` picks the
    steps the headline numbers cover: the steady ones (default: set-up, warm-up, partial and outlier
    steps left out, see tracekit.analyzers.steady), all, or a range of step numbers; a
    StepSelection or its text ("steady", "all", "N-M"; StepsError when malformed)."""
    selection = StepSelection.of(steps)
    selected = [trace.rank(rank)] if rank is not None else list(trace.ranks.values())
    with_gpu = [r for r in selected if r.has_gpu] or selected
    device = match_device(with_gpu[0].meta)
    results = tuple(analyze_rank(r, device=device, steps=selection) for r in selected)
    totals = sum((r.launch.totals for r in results), LaunchTotals())
    masks = [r.launch.plan.gpu_rows for r in results]
    queues = [r.launch.activities["queue_us"].to_numpy()[m] for r, m in zip(results, masks, strict=True)]
    all_keys = pd.concat([r.classification.table[CLASS][m] for r, m in zip(results, masks, strict=True)],
                         ignore_index=True)
    all_libs = pd.concat([r.classification.table[LIBRARY][m] for r, m in zip(results, masks, strict=True)],
                         ignore_index=True)
    all_dur = pd.concat([s.gpu["dur"].astype(float)[m] for s, m in zip(selected, masks, strict=True)],
                        ignore_index=True)
    warnings = list(trace.warnings)
    for r in results:
        warnings.extend(r.roofline.notes)
        warnings.extend(r.failures)
    return Analysis(
        path=str(trace.path), ranks=results, device=device, totals=totals,
        queue=QueueStats.of(np.concatenate(queues) if queues else np.empty(0)),
        classes=summarize(all_keys, all_dur), libraries=summarize(all_libs, all_dur),
        kernels=_combine_rows([r.roofline.table for r in results], device), tokens_per_step=tokens_per_step,
        warnings=tuple(dict.fromkeys(warnings)), steps_mode=selection.mode,
    )
