"""Reports through the pipeline: files -> per-rank results (in parallel) -> view model -> HTML file;
and the Python API's entry points for traces already in memory."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.step_selection import STEADY_STEPS, StepSelection
from tracekit.executor import Progress, Scheduler
from tracekit.model.projection import DEFAULT_OVERHEAD, ProfilerOverhead
from tracekit.pipeline.core import RunResult, run
from tracekit.pipeline.local import analyse_ranks
from tracekit.suggestions import Suggestion
from tracekit.trace.inputs import collect_inputs
from tracekit.trace.model import Trace

if TYPE_CHECKING:
    from tracekit.report.context import ReportView


def default_report_path(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> Path:
    """Where the report of `inputs` goes by default: beside the file or directory (for a glob: its
    directory; for a list: its first item), named '<stem>.report.html'."""
    from tracekit.report import default_output

    first = str(inputs) if isinstance(inputs, (str, os.PathLike)) else str(next(iter(inputs)))
    if not Path(first).exists() and glob.has_magic(first):
        first = str(Path(first).parent)
    return default_output(first)


def report_of(result: RunResult) -> ReportView:
    """The report's view model of a run with views."""
    from tracekit._version import __version__
    from tracekit.report.context import ReportView, report_title
    from tracekit.report.ranks_view import cross_rank_view

    views = tuple(r.view for r in result.results if r.view is not None)
    rows = tuple(r.row for r in result.results if r.row is not None) if result.multi else ()
    cross = cross_rank_view(result.cross, result.cross_suggestions) if result.multi else None
    title, source = report_title(result.path)
    return ReportView(title=title, source=source, version=__version__, ranks=views,
                      warnings=result.warnings, rank_rows=rows, cross=cross)


@dataclass(frozen=True)
class WrittenReport:
    """What writing a report did: the file written, the one asked for, the run and the view it shows."""

    path: Path  # the file written: `wanted`, or a numbered name beside it when that existed (no force)
    wanted: Path  # the path asked for (or the default beside the trace)
    result: RunResult
    view: ReportView


def produce_report(trace_path: str | os.PathLike | Sequence[str | os.PathLike],
                   out_path: str | os.PathLike | None = None, *, force: bool = False, rank: int | None = None,
                   jobs: int | None = None, scheduler: Scheduler = None, steps: StepSelection | str = STEADY_STEPS,
                   max_bytes: int | None = None, captures: Sequence[str] = (),
                   progress: Progress | None = None, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                   also_read: Sequence[str | os.PathLike] = (), keep_going: bool = False,
                   scheduler_wait: float | None = None) -> WrittenReport:
    """Load, analyse and report traces (file, directory of ranks, glob or list): the inputs resolved and
    the target checked before the long work, the ranks run (tracekit.pipeline.run), the view written.
    The output may be none of the files read: traces, capture traces, `also_read` (a calibration file).

    Atomic; an existing file is replaced only with force=True, else the report goes to a numbered
    name beside it (WrittenReport.path differs from .wanted)."""
    from tracekit.output import check_target
    from tracekit.report import write_view

    selection = StepSelection.of(steps)  # StepsError when malformed, before any work
    inputs = (*collect_inputs(trace_path, captures).files, *map(Path, also_read))  # every file read
    wanted = Path(out_path) if out_path is not None else default_report_path(trace_path)
    check_target(wanted, inputs=inputs, force=force)  # before the long work
    result = run(trace_path, rank=rank, jobs=jobs, scheduler=scheduler, view=True, steps=selection,
                 max_bytes=max_bytes, captures=captures, progress=progress, overhead=overhead,
                 keep_going=keep_going, scheduler_wait=scheduler_wait)
    view = report_of(result)
    written = write_view(view, wanted, force=force, inputs=inputs)
    return WrittenReport(path=written, wanted=wanted, result=result, view=view)


def write_report(trace_path: str | os.PathLike | Sequence[str | os.PathLike], out_path: str | os.PathLike | None = None,
                 *, force: bool = False, rank: int | None = None, jobs: int | None = None,
                 scheduler: Scheduler = None, steps: StepSelection | str = STEADY_STEPS, progress: Progress | None = None) -> Path:
    """Load, analyse and report traces (file, directory of ranks, glob or list); return the path written.

    Atomic; an existing file is replaced only with force=True, else the report goes to a numbered
    name beside it (compare the returned path with `out_path`)."""
    return produce_report(trace_path, out_path, force=force, rank=rank, jobs=jobs, scheduler=scheduler,
                          steps=steps, progress=progress).path


def build_view(trace: Trace, *, rank: int | None = None, steps: StepSelection | str = STEADY_STEPS) -> ReportView:
    """The report's view model of an already loaded Trace (every rank, or only `rank`)."""
    from tracekit._version import __version__
    from tracekit.report.context import rank_view, report_view

    shown = tuple(str(w) for w in trace.warnings)
    views = [rank_view(r.analysis, r.suggestions, shown, model=r.models[0] if r.models else None)
             for r in analyse_ranks(trace, rank=rank, steps=steps).values()]
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
        per_rank = analyse_ranks(trace)
        analysis = {r: x.analysis for r, x in per_rank.items()}
        if suggestions is None:
            suggestions = {r: x.suggestions for r, x in per_rank.items()}
    analyses = dict(analysis) if isinstance(analysis, Mapping) else {analysis.ranks[0].rank: analysis}
    sugg = suggestions if isinstance(suggestions, Mapping) else dict.fromkeys(analyses, suggestions)
    shown = tuple(str(w) for w in (getattr(trace, "warnings", None) or ()))
    views = [rank_view(a, sugg.get(r), shown) for r, a in analyses.items()]
    path = str(getattr(trace, "path", "") or next(iter(analyses.values())).path)
    return render(report_view(views, path=path, warnings=shown, version=__version__))


def verdict_line(result: RunResult) -> str:
    """The report's headline in one line: 'verdict: Launch-bound; biggest win: Capture the step ... (~6.37 ms per step)'."""
    from tracekit.report.headline import job_headline

    label, win = job_headline(result.summary, result.suggestions)
    return f"verdict: {label or 'none'}" + (f"; biggest win: {win}" if win else "")
