"""The report's view model: typed analyzer results turned into strings, bars and chart data.

`rank_view` is a pure function of one rank's Analysis and suggestions (it can run in a worker process
and its RankView be shipped back); `report_view` assembles RankViews into the page.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.launch import LaunchOverhead
from tracekit.model.outlook import RankModel
from tracekit.paths import export_path
from tracekit.report import charts
from tracekit.report.critical_view import critical_band
from tracekit.report.graphs_view import GraphSection, graph_section
from tracekit.report.headline import (
    Tile,
    model_line,
    sentence,
    steps_summary,
    tiles,
    verdict_label,
    verdict_rule,
)
from tracekit.report.memory_view import MemoryCard, memory_card
from tracekit.report.meta import SHAPES_WARNING, cpu_bars, meta_rows, warnings
from tracekit.report.operators_view import OperatorCard, operator_cards
from tracekit.report.palette import VERDICTS
from tracekit.report.suggest_view import SuggestionView, overlap_note, suggestion_views
from tracekit.report.tables import (
    Bar,
    KernelTable,
    StepRow,
    kernel_table,
    step_label,
    step_rows,
    summary_bars,
)
from tracekit.suggestions.model import Suggestion
from tracekit.units import DASH, fmt_int, fmt_pct, fmt_time, plural

__all__ = ["SHAPES_WARNING", "RankRow", "RankView", "ReportView", "Tile", "rank_view", "report_title",
           "report_view"]


@dataclass(frozen=True)
class RankRow:
    """One line of the rank comparison table of a multi-rank report."""

    anchor: str
    rank: int
    verdict_label: str
    verdict_css: str
    span: str
    gpu_busy: str
    util: str
    util_w: float
    cpu_launch: str
    kernels: str
    comm: str


@dataclass(frozen=True)
class Handoff:
    """Where to look next in Perfetto: the export command and the worst steady step's time range."""

    command: str
    step: str  # 'step 12' or '' when the trace has no steps
    start_ms: str  # from the trace start, as Perfetto shows it
    end_ms: str
    span: str


@dataclass(frozen=True)
class RankView:
    """Everything the templates show for one rank, already formatted (charts as JSON-ready dicts)."""

    rank: int
    anchor: str  # html id prefix: 'r0'
    verdict: str  # verdict key, e.g. 'launch-bound'
    verdict_label: str
    verdict_css: str
    verdict_rule: str
    sentence: str
    steps_head: str  # which steps the headline numbers cover
    excluded: tuple[str, ...]  # the steps left out of them, with what they hold (a row of alike steps per line)
    excluded_count: int  # how many steps are left out
    top_change: SuggestionView | None
    tiles: tuple[Tile, ...]
    suggestions: tuple[SuggestionView, ...]
    suggestions_available: bool
    overlap_note: str
    classes: tuple[Bar, ...]
    libraries: tuple[Bar, ...]
    steps: tuple[StepRow, ...]
    steps_note: str
    timeline: dict[str, Any] | None
    roofline: dict[str, Any] | None
    kernels: KernelTable
    cpu_ops: tuple[Bar, ...]
    meta: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    row: RankRow
    handoff: Handoff | None
    source: str  # the rank's trace file
    graphs: GraphSection | None = None  # CUDA graph replays (report/graphs_view.py)
    model_note: str = ""  # the headline's line when the execution model abstains, with its reason
    totals_scope: str = "totals"  # what the cards of totals add up: 'totals over the 20 steady steps'
    memory: MemoryCard | None = None  # GPU memory per step (profile_memory traces)
    operators: tuple[OperatorCard, ...] = ()  # time by op / module / source line, sortable

    @property
    def shapes_missing(self) -> bool:
        return SHAPES_WARNING in self.warnings


@dataclass(frozen=True)
class ReportView:
    """The whole report: trace-level warnings, the rank comparison, one RankView per rank."""

    title: str
    source: str
    version: str
    ranks: tuple[RankView, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    rank_rows: tuple[RankRow, ...] = field(default_factory=tuple)
    cross: Any = None  # tracekit.report.ranks_view.CrossRankView: the section at the top of multi-rank reports

    @property
    def multi(self) -> bool:
        return len(self.ranks) > 1


def export_command(source: str) -> str:
    """The `tracekit export` command of a trace, shell-quoted (shlex.join): pasted, it runs nothing
    that a file name holds; `--` keeps a name that starts with '-' from being read as an option."""
    out = export_path(source).name
    args = ["-o", out, "--", source] if source.startswith("-") else [source, "-o", out]
    return shlex.join(["tracekit", "export", *args])


def _handoff(lo: LaunchOverhead, source: str) -> Handoff | None:
    """The worst (longest) steady step, in ms from the trace start, and the export command."""
    steps = lo.steps
    if not len(steps):
        return None
    steady = steps[steps["phase"] == "steady"] if "phase" in steps else steps
    pick = steady if len(steady) else steps
    row = pick.loc[(pick["end"] - pick["ts"]).idxmax()]
    number = int(row["step"])
    zero = min(0.0, float(steps["ts"].min()))  # Perfetto counts from the first event
    return Handoff(
        command=export_command(source),
        step=step_label(number) if number >= 0 else "",
        start_ms=f"{(float(row['ts']) - zero) / 1e3:,.3f}",
        end_ms=f"{(float(row['end']) - zero) / 1e3:,.3f}",
        span=fmt_time(float(row["end"] - row["ts"])),
    )


def _rank_row(a: Analysis, anchor: str, label: str, css: str, classes: Sequence[Bar]) -> RankRow:
    t = a.totals
    util = t.gpu_busy_us / t.span_us if t.span_us else None
    comm = next((c for c in classes if c.label == "communication"), None)
    return RankRow(
        anchor=anchor,
        rank=a.ranks[0].rank,
        verdict_label=label,
        verdict_css=css,
        span=fmt_time(t.span_us),
        gpu_busy=fmt_time(t.gpu_busy_us),
        util=fmt_pct(util),
        util_w=round(100 * (util or 0.0), 2),
        cpu_launch=fmt_time(t.cpu_launch_us),
        kernels=fmt_int(t.kernels),
        comm=f"{comm.value} ({comm.pct})" if comm else DASH,
    )


def rank_view(analysis: Analysis, suggestions: Sequence[Suggestion] | None, shown: Sequence[str] = (),
              model: RankModel | None = None) -> RankView:
    """The view of one rank from its Analysis (analyze(trace, rank=r): one RankAnalysis) and its suggestions.

    `suggestions` None means the rules did not run (the report says so). `shown` are the trace-level
    warnings already at the top of the report (not repeated per rank). `model`: the rank's execution
    model (tracekit.pipeline.local.LocalResult.models), for the timeline's critical-path band.
    """
    if len(analysis.ranks) != 1:
        raise ValueError(f"rank_view takes the analysis of one rank, got {len(analysis.ranks)} ranks")
    ra = analysis.ranks[0]
    facts = ra.facts
    if facts is None:
        raise ValueError("rank_view needs RankAnalysis.facts (analyze() computes them)")
    verdict = analysis.verdict if facts.has_gpu or analysis.verdict == "undetermined" else "cpu-only"
    css, label = VERDICTS.get(verdict, ("neutral", verdict or "Summary"))
    label = verdict_label(verdict, analysis.cause, label)
    steps_head, excluded = steps_summary(analysis)
    left_out = len(analysis.excluded)
    classes = tuple(summary_bars(analysis.classes, colors=True)) if facts.has_gpu else ()
    cards = suggestion_views(suggestions, analysis.totals, steps=max(analysis.headline.steps / len(analysis.ranks), 1.0))
    timeline = charts.timeline(ra.timeline) if ra.timeline is not None else None
    band = critical_band(model, ra.timeline.t0_us) if ra.timeline is not None else None
    if timeline is not None and band is not None:
        timeline["critical"] = band
    steps, steps_note = step_rows(ra.launch)
    anchor = f"r{ra.rank}"
    return RankView(
        rank=ra.rank,
        anchor=anchor,
        verdict=verdict,
        verdict_label=label,
        verdict_css=css,
        verdict_rule=verdict_rule(verdict),
        sentence=sentence(verdict, analysis.evidence, classes),
        steps_head=steps_head,
        excluded=excluded,
        excluded_count=left_out,
        top_change=cards[0] if cards else None,
        tiles=tiles(analysis, facts),
        suggestions=tuple(cards),
        suggestions_available=suggestions is not None,
        overlap_note=overlap_note(cards),
        classes=classes,
        libraries=tuple(summary_bars(analysis.libraries, colors=False)) if facts.has_gpu else (),
        steps=tuple(steps),
        steps_note=steps_note,
        timeline=timeline,
        roofline=charts.roofline(analysis.device, analysis.kernels) if facts.has_gpu else None,
        kernels=kernel_table(analysis.kernels),
        cpu_ops=cpu_bars(facts.cpu) if not facts.has_gpu else (),
        meta=meta_rows(analysis, facts),
        warnings=warnings(analysis, facts, shown),
        row=_rank_row(analysis, anchor, label, css, classes),
        handoff=_handoff(ra.launch, analysis.path) if facts.has_gpu else None,
        source=facts.path,
        graphs=graph_section([r.graphs for r in analysis.ranks if r.graphs is not None]),
        model_note=model_line(analysis) if facts.has_gpu else "",
        memory=memory_card(ra.memory, verdict), operators=operator_cards(ra.operators),
        totals_scope=(f"totals over the {plural(analysis.totals.steps, 'steady step')}"
                      if all(r.launch.scope != "trace" for r in analysis.ranks) else "totals over the whole trace"),
    )


def report_view(ranks: Sequence[RankView], *, path: str, warnings: Sequence[str] = (), version: str = "") -> ReportView:
    """The whole report from the RankViews (any order: shown by rank) of the trace at `path`."""
    views = tuple(sorted(ranks, key=lambda v: v.rank))
    title, path = report_title(path)
    return ReportView(
        title=title,
        source=path,
        version=version,
        ranks=views,
        warnings=tuple(str(w) for w in warnings),
        rank_rows=tuple(v.row for v in views) if len(views) > 1 else (),
    )


def report_title(path: str) -> tuple[str, str]:
    """(page title, shown source path) of a report of `path` (a file, directory or list of inputs)."""
    path = os.path.normpath(path) if path else path
    name = path.rstrip("/").rsplit("/", 1)[-1] if path else "trace"
    return f"tracekit report · {name}", path
