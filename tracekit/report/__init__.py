"""The HTML report: analyzer results -> view model (context) -> jinja2 templates -> one offline HTML file.

Loading and analysing (per rank, in parallel) is tracekit.pipeline's job: `write_report`,
`build_view` and `render_html` live in tracekit.pipeline.reports (and `tracekit.write_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tracekit.output import write_atomic
from tracekit.paths import report_path
from tracekit.report.context import ReportView, rank_view, report_view
from tracekit.report.html import render

__all__ = [
    "ReportView",
    "default_output",
    "rank_view",
    "report_view",
    "write_view",
]



def default_output(trace_path: str | Path) -> Path:
    """Where a report goes by default: '<trace stem>.report.html' beside the trace file or directory."""
    return report_path(trace_path)


def write_view(view: ReportView, out_path: str | Path, *, force: bool = False,
               inputs: Sequence[str | Path] = ()) -> Path:
    """Render `view` and write it atomically to `out_path` (or a free name beside it without force);
    an `out_path` that is one of the `inputs` (trace files) is refused, even with force."""
    return write_atomic(Path(out_path), lambda: render(view), force=force, inputs=[Path(p) for p in inputs])
