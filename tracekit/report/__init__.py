"""The HTML report: analyzer results -> view model (context) -> jinja2 templates -> one offline HTML file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.paths import report_path
from tracekit.report.context import ReportView, rank_view, report_view
from tracekit.report.html import render
from tracekit.report.write import write_atomic
from tracekit.suggestions.model import Suggestion

__all__ = [
    "ReportView",
    "build_view",
    "default_output",
    "rank_view",
    "render_html",
    "report_view",
    "write_report",
    "write_view",
]

def _version() -> str:
    from tracekit import __version__

    return __version__


def render_html(
    analysis: Analysis | Mapping[int, Analysis],
    trace: Any = None,
    *,
    suggestions: Sequence[Suggestion] | Mapping[int, Sequence[Suggestion] | None] | None = None,
) -> str:
    """The report HTML for the Analysis of one rank, or a {rank: Analysis} mapping (one rank each).

    `trace` (optional) gives the report its path and trace-level warnings. `suggestions` is a list for
    a single analysis, or {rank: list}; None means the rules were not run (the report says so), []
    means no rule fired. Nothing is re-analysed here: analyse each rank with analyze(trace, rank=r).
    """
    analyses = dict(analysis) if isinstance(analysis, Mapping) else {analysis.ranks[0].rank: analysis}
    sugg = suggestions if isinstance(suggestions, Mapping) else dict.fromkeys(analyses, suggestions)
    shown = tuple(str(w) for w in (getattr(trace, "warnings", None) or ()))
    views = [rank_view(a, sugg.get(r), shown) for r, a in analyses.items()]
    path = str(getattr(trace, "path", "") or next(iter(analyses.values())).path)
    return render(report_view(views, path=path, warnings=shown, version=_version()))


def default_output(trace_path: str | Path) -> Path:
    """Where a report goes by default: '<trace stem>.report.html' beside the trace file or directory."""
    return report_path(trace_path)


def build_view(trace: Any, *, rank: int | None = None, steps: str = "steady") -> ReportView:
    """Analyse a loaded Trace (every rank, or only `rank`) and build the report's view model."""
    from tracekit.report.pipeline import analyse_trace

    analyses, suggestions = analyse_trace(trace, rank=rank, steps=steps)
    shown = tuple(str(w) for w in trace.warnings)
    views = [rank_view(analyses[r], suggestions[r], shown) for r in analyses]
    return report_view(views, path=str(trace.path), warnings=shown, version=_version())


def write_view(view: ReportView, out_path: str | Path, *, force: bool = False,
               inputs: Sequence[str | Path] = ()) -> Path:
    """Render `view` and write it atomically to `out_path` (or a free name beside it without force);
    an `out_path` that is one of the `inputs` (trace files) is refused, even with force."""
    return write_atomic(Path(out_path), lambda: render(view), force=force, inputs=[Path(p) for p in inputs])


def write_report(
    trace_path: str | Path,
    out_path: str | Path | None = None,
    *,
    force: bool = False,
    rank: int | None = None,
) -> Path:
    """Load, analyse and report a trace (file or directory of ranks); return the path written.

    The file is written atomically; an existing file is replaced only with force=True, else the
    report goes to a numbered name beside it (compare the returned path with `out_path`).
    """
    from tracekit.report.write import check_target
    from tracekit.trace.files import trace_files
    from tracekit.trace.load import load_trace

    inputs = trace_files(trace_path)
    out = Path(out_path) if out_path is not None else default_output(trace_path)
    check_target(out, inputs=inputs, force=force)
    view = build_view(load_trace(trace_path), rank=rank)
    return write_view(view, out, force=force, inputs=inputs)
