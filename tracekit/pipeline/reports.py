"""Reports through the pipeline: files -> per-rank results (in parallel) -> view model -> HTML file;
and the Python API's entry points for traces already in memory."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.analyzers.analysis import Analysis, analyze
from tracekit.executor import Progress
from tracekit.pipeline import RunResult, resolve_inputs, run
from tracekit.suggestions import Suggestion, suggest
from tracekit.trace.load import load_trace
from tracekit.trace.model import Trace


def default_report_path(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> Path:
    """Where the report of `inputs` goes by default: beside the file or directory (for a glob: its
    directory; for a list: its first item), named '<stem>.report.html'."""
    from tracekit.report import default_output

    first = str(inputs) if isinstance(inputs, (str, os.PathLike)) else str(next(iter(inputs)))
    if not Path(first).exists() and glob.has_magic(first):
        first = str(Path(first).parent)
    return default_output(first)


def report_of(result: RunResult) -> Any:
    """The report's view model (tracekit.report.context.ReportView) of a run with views."""
    from tracekit._version import __version__
    from tracekit.report.context import ReportView, report_title
    from tracekit.report.ranks_view import cross_rank_view

    views = tuple(r.view for r in result.results if r.view is not None)
    rows = tuple(r.row for r in result.results if r.row is not None) if result.multi else ()
    cross = cross_rank_view(result.cross, result.cross_suggestions, result.results) if result.multi else None
    title, source = report_title(result.path)
    return ReportView(title=title, source=source, version=__version__, ranks=views,
                      warnings=result.warnings, rank_rows=rows, cross=cross)


def write_report(trace_path: str | os.PathLike | Sequence[str | os.PathLike], out_path: str | os.PathLike | None = None,
                 *, force: bool = False, rank: int | None = None, jobs: int | None = None,
                 scheduler: Any = None, steps: str = "steady", progress: Progress | None = None) -> Path:
    """Load, analyse and report traces (file, directory of ranks, glob or list); return the path written.

    Atomic; an existing file is replaced only with force=True, else the report goes to a numbered
    name beside it (compare the returned path with `out_path`)."""
    from tracekit.output import check_target
    from tracekit.report import write_view

    inputs = resolve_inputs(trace_path)
    wanted = Path(out_path) if out_path is not None else default_report_path(trace_path)
    check_target(wanted, inputs=inputs, force=force)  # before the long work
    result = run(trace_path, rank=rank, jobs=jobs, scheduler=scheduler, view=True, steps=steps,
                 progress=progress)
    return write_view(report_of(result), wanted, force=force, inputs=inputs)


def analysis_of(path: str | os.PathLike) -> Analysis:
    """`analyze(load_trace(path))`: the combined Analysis object of the Python API (all in memory)."""
    return analyze(load_trace(path))


def analyse_trace(trace: Trace, *, rank: int | None = None, steps: str = "steady"
                  ) -> tuple[dict[int, Analysis], dict[int, list[Suggestion]]]:
    """({rank: Analysis}, {rank: suggestions}) for every rank of a loaded `trace`, or only `rank`;
    `steps` picks the headline steps (see tracekit.analyzers.analyze)."""
    ranks = [trace.rank(rank).rank] if rank is not None else sorted(trace.ranks)
    analyses = {r: analyze(trace, rank=r, steps=steps) for r in ranks}
    return analyses, {r: suggest(a) for r, a in analyses.items()}


def build_view(trace: Trace, *, rank: int | None = None, steps: str = "steady") -> Any:
    """The report's view model of an already loaded Trace (every rank, or only `rank`)."""
    from tracekit._version import __version__
    from tracekit.report.context import rank_view, report_view

    analyses, suggestions = analyse_trace(trace, rank=rank, steps=steps)
    shown = tuple(str(w) for w in trace.warnings)
    views = [rank_view(analyses[r], suggestions[r], shown) for r in analyses]
    return report_view(views, path=str(trace.path), warnings=shown, version=__version__)


def render_html(analysis: Analysis | Mapping[int, Analysis], trace: Trace | None = None, *,
                suggestions: Sequence[Suggestion] | Mapping[int, Sequence[Suggestion] | None] | None = None) -> str:
    """The report HTML for the Analysis of one rank, or a {rank: Analysis} mapping (one rank each).

    `trace` (optional) gives the report its path and trace-level warnings. `suggestions` is a list
    for a single analysis, or {rank: list}; None means the rules were not run (the report says so),
    [] means no rule fired. An Analysis that combines several ranks (`analyze(trace)` of a
    multi-rank trace) is redone per rank from `trace`, so that each rank gets its own section."""
    from tracekit._version import __version__
    from tracekit.report.context import rank_view, report_view
    from tracekit.report.html import render

    if isinstance(analysis, Analysis) and len(analysis.ranks) > 1:
        if trace is None:
            raise ValueError("a multi-rank Analysis needs its trace to be reported per rank")
        analysis, per_rank = analyse_trace(trace)
        if suggestions is None:
            suggestions = per_rank
    analyses = dict(analysis) if isinstance(analysis, Mapping) else {analysis.ranks[0].rank: analysis}
    sugg = suggestions if isinstance(suggestions, Mapping) else dict.fromkeys(analyses, suggestions)
    shown = tuple(str(w) for w in (getattr(trace, "warnings", None) or ()))
    views = [rank_view(a, sugg.get(r), shown) for r, a in analyses.items()]
    path = str(getattr(trace, "path", "") or next(iter(analyses.values())).path)
    return render(report_view(views, path=path, warnings=shown, version=__version__))
