"""The HTML report: analyzer results -> view model (context) -> jinja2 templates -> one offline HTML file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.report.context import ReportView, report_view
from tracekit.report.html import render
from tracekit.report.write import write_atomic

__all__ = [
    "ReportView",
    "build_view",
    "default_output",
    "render_html",
    "report_view",
    "write_report",
    "write_view",
]

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".gz")


def _version() -> str:
    from tracekit import __version__

    return __version__


def render_html(
    analysis: Any,
    trace: Any = None,
    *,
    suggestions: Sequence[Any] | Mapping[int, Sequence[Any] | None] | None = None,
) -> str:
    """The report HTML for one Analysis (or a {rank: Analysis} mapping) of `trace`.

    `suggestions` is a list of Suggestion objects for a single analysis, or {rank: list}; None means
    the suggestions engine was not run (the report says so), [] means no rule fired. An Analysis
    that combines several ranks (`analyze(trace)` of a multi-rank trace) is redone per rank, so
    that each rank gets its own section.
    """
    combined = getattr(analysis, "ranks", None)
    if trace is not None and isinstance(combined, tuple) and len(combined) > 1:
        from tracekit.report.pipeline import analyse_trace

        analysis, per_rank = analyse_trace(trace)
        if suggestions is None:
            suggestions = per_rank
    if isinstance(analysis, Mapping) and analysis and all(isinstance(k, int) for k in analysis):
        analyses = dict(analysis)
        sugg = suggestions if isinstance(suggestions, Mapping) else dict.fromkeys(analyses, suggestions)
    else:
        rank = getattr(trace.rank(), "rank", 0) if trace is not None and hasattr(trace, "rank") else 0
        analyses = {rank: analysis}
        sugg = {rank: suggestions} if not isinstance(suggestions, Mapping) else suggestions
    return render(report_view(analyses, trace, sugg, version=_version()))


def default_output(trace_path: str | Path) -> Path:
    """Where a report goes by default: '<trace stem>.report.html' beside the trace file or directory."""
    p = Path(trace_path)
    name = p.name
    if p.is_file():
        for suffix in TRACE_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
    return p.with_name(f"{name}.report.html")


def build_view(trace: Any, *, rank: int | None = None, steps: str = "steady") -> ReportView:
    """Analyse a loaded Trace (every rank, or only `rank`) and build the report's view model."""
    from tracekit.report.pipeline import analyse_trace

    analyses, suggestions = analyse_trace(trace, rank=rank, steps=steps)
    return report_view(analyses, trace, suggestions, version=_version())


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
