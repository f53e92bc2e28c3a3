"""The report's view model: analyzer results (tracekit.analysis/1 dicts) turned into strings, bars and chart data."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.report import charts
from tracekit.report.format import DASH, fmt_int, fmt_pct, fmt_time, num
from tracekit.report.graphs_view import GraphSection, graph_section
from tracekit.report.headline import (
    Tile,
    sentence,
    steps_summary,
    tiles,
    verdict_label,
    verdict_rule,
)
from tracekit.report.meta import SHAPES_WARNING, cpu_ops, meta_rows, warnings
from tracekit.report.palette import VERDICTS
from tracekit.report.suggest_view import SuggestionView, suggestion_views
from tracekit.report.tables import (
    Bar,
    KernelTable,
    StepRow,
    class_bars,
    kernel_table,
    library_bars,
    shapes_text,
    step_rows,
)

__all__ = ["SHAPES_WARNING", "RankRow", "RankView", "ReportView", "Tile", "rank_view", "report_view"]


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
    steps_head: str
    excluded: tuple[str, ...]
    top_change: SuggestionView | None
    tiles: tuple[Tile, ...]
    suggestions: tuple[SuggestionView, ...]
    suggestions_available: bool
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
    graphs: GraphSection | None = None  # CUDA graph replays (report/graphs_view.py)

    @property
    def shapes_missing(self) -> bool:
        return SHAPES_WARNING in self.warnings


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
class ReportView:
    """The whole report: trace-level warnings, the rank comparison, one RankView per rank."""

    title: str
    source: str
    version: str
    ranks: tuple[RankView, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    rank_rows: tuple[RankRow, ...] = field(default_factory=tuple)

    @property
    def multi(self) -> bool:
        return len(self.ranks) > 1


def as_dict(analysis: Any) -> dict[str, Any]:
    """An Analysis (with to_dict) or an already-serialised tracekit.analysis/1 dict."""
    to_dict = getattr(analysis, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(analysis or {})


def rank_view(
    analysis: Any, rank: Any = None, suggestions: Sequence[Any] | None = None, shown: Sequence[str] = ()
) -> RankView:
    """The view of one rank from its analysis, its RankTrace (or None) and its suggestions.

    `shown` are the trace-level warnings already at the top of the report (not repeated per rank).
    """
    a = as_dict(analysis)
    if suggestions is None and a.get("suggestions") is not None:
        suggestions = a["suggestions"]
    s = a.get("summary") or {}
    kernels = list(a.get("kernels") or ())
    gpu = getattr(rank, "gpu", None)
    has_gpu = bool(kernels) or (gpu is not None and len(gpu) > 0)
    verdict = str(s.get("verdict") or ("cpu-only" if not has_gpu else ""))
    css, label = VERDICTS.get(verdict, ("neutral", verdict or "Summary"))
    label = verdict_label(verdict, s.get("cause"), label)
    steps_head, excluded = steps_summary(a)
    classes = class_bars(a.get("classes") or (), kernels)
    cards = suggestion_views(suggestions)
    rank_no = int(getattr(rank, "rank", a.get("rank", 0)) or 0)
    steps, steps_note = step_rows(list(a.get("steps") or ()))
    roof = charts.roofline(a.get("device") or {}, kernels, shapes_text) if kernels else None
    return RankView(
        rank=rank_no,
        anchor=f"r{rank_no}",
        verdict=verdict,
        verdict_label=label,
        verdict_css=css,
        verdict_rule=verdict_rule(verdict),
        sentence=sentence(verdict, s, classes),
        steps_head=steps_head,
        excluded=excluded,
        top_change=cards[0] if cards else None,
        tiles=tiles(a, rank, has_gpu),
        suggestions=tuple(cards),
        suggestions_available=suggestions is not None,
        classes=tuple(classes),
        libraries=tuple(library_bars(a.get("libraries") or (), kernels)),
        steps=tuple(steps),
        steps_note=steps_note,
        timeline=charts.timeline(rank) if rank is not None else None,
        roofline=roof,
        kernels=kernel_table(kernels),
        cpu_ops=cpu_ops(rank) if not has_gpu else (),
        meta=meta_rows(a, rank, has_gpu),
        warnings=warnings(a, rank, shown),
        graphs=graph_section(a),
    )


def report_view(
    analyses: Mapping[int, Any],
    trace: Any = None,
    suggestions: Mapping[int, Sequence[Any] | None] | None = None,
    *,
    version: str = "",
) -> ReportView:
    """The whole report: one RankView per analysed rank, ordered by rank."""
    ranks = getattr(trace, "ranks", None) or {}
    shown = tuple(str(w) for w in (getattr(trace, "warnings", None) or ()))
    docs = {r: as_dict(analyses[r]) for r in sorted(analyses)}  # to_dict() once per rank
    views = tuple(rank_view(docs[r], ranks.get(r), (suggestions or {}).get(r), shown) for r in docs)
    rows = tuple(_rank_row(docs[r], v) for r, v in zip(docs, views, strict=True))
    path = str(getattr(trace, "path", "") or "")
    path = os.path.normpath(path) if path else path
    name = path.rstrip("/").rsplit("/", 1)[-1] if path else "trace"
    return ReportView(
        title=f"tracekit report · {name}",
        source=path,
        version=version,
        ranks=views,
        warnings=shown,
        rank_rows=rows if len(rows) > 1 else (),
    )


def _rank_row(a: Mapping[str, Any], view: RankView) -> RankRow:
    s = a.get("summary") or {}
    span, busy = num(s.get("span_us")), num(s.get("gpu_busy_us"))
    util = busy / span if span and busy is not None else None
    comm = next((c for c in view.classes if c.label == "communication"), None)
    return RankRow(
        anchor=view.anchor,
        rank=view.rank,
        verdict_label=view.verdict_label,
        verdict_css=view.verdict_css,
        span=fmt_time(span),
        gpu_busy=fmt_time(busy),
        util=fmt_pct(util),
        util_w=round(100 * (util or 0.0), 2),
        cpu_launch=fmt_time(s.get("cpu_launch_us")),
        kernels=fmt_int(s.get("kernels")),
        comm=f"{comm.value} ({comm.pct})" if comm else DASH,
    )
