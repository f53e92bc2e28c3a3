"""The orchestration behind tracekit.pipeline: load, analyze, suggest per rank in parallel; merge."""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tracekit.analyzers.rank_digest import RankDigest, rank_digest
from tracekit.analyzers.step_selection import (  # noqa: F401  (StepsError re-exported for the commands)
    STEADY_STEPS,
    StepSelection,
    StepsError,
)
from tracekit.analyzers.summary import AnalysisSummary, combine, rank_summary
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.executor import Progress, Scheduler, run_tasks
from tracekit.model.projection import DEFAULT_OVERHEAD, ProfilerOverhead
from tracekit.pipeline.local import analyse_trace, load_file
from tracekit.suggestions import Suggestion
from tracekit.suggestions.document import RankedSuggestion, by_saving, document, ranked
from tracekit.trace import files
from tracekit.trace.inputs import collect_inputs
from tracekit.trace.load import stderr_progress
from tracekit.trace.model import Trace

if TYPE_CHECKING:
    from tracekit.analyzers.ranks import CrossRank
    from tracekit.report.context import RankRow, RankView

Outcome = TypeVar("Outcome")  # what a worker returns for a readable file


@dataclass(frozen=True)
class RankTask:
    """What a worker gets: one trace file and the options of the run."""

    path: str
    tokens_per_step: float | None = None
    view: bool = False  # also build the rank's report section (view fragment)
    steps: StepSelection = STEADY_STEPS  # the headline steps (tracekit.analyzers.analyze)
    show_load: bool = False  # loading progress on stderr (a terminal; only for work in the caller's process)
    max_bytes: int | None = None  # refuse a larger trace (tracekit.trace.load.load_trace)
    captures: tuple[str, ...] = ()  # CUDA-graph capture traces (load_trace)
    overhead: ProfilerOverhead = DEFAULT_OVERHEAD  # the profiler's cost where a trace carries no bare timings


@dataclass(frozen=True)
class RankResult:
    """What a worker returns for one rank: its summary, suggestions and view, never the event tables."""

    rank: int
    path: str
    origin_us: int  # the file's clock origin (µs): digest times are absolute on it
    summary: AnalysisSummary  # adds up over ranks (tracekit.analyzers.summary)
    digest: RankDigest
    suggestions: tuple[Suggestion, ...]
    view: RankView | None  # the rank's report section, when the task asked for it
    row: RankRow | None  # its line in the report's rank table, with the view
    warnings: tuple[str, ...]  # what loading this file warned about
    seconds: float  # wall time in the worker
    cpu_seconds: float  # CPU time of the worker on this rank
    peak_rss_kb: int  # the worker process's peak resident set so far
    pid: int

    def renumbered(self, number: int) -> RankResult:
        """The same result under another rank number (two files claimed the same rank)."""
        view = dataclasses.replace(self.view, rank=number, anchor=f"r{number}") if self.view is not None else None
        row = dataclasses.replace(self.row, rank=number, anchor=f"r{number}") if self.row is not None else None
        return dataclasses.replace(self, rank=number, summary=self.summary.renumbered(number), view=view, row=row,
                                   digest=dataclasses.replace(self.digest, rank=number))


@dataclass(frozen=True)
class RankFailure:
    """A file that is not a readable trace (skipped with a warning when other files load)."""

    path: str
    message: str


def peak_rss_kb() -> int:
    """This process's peak resident set (kB): VmHWM on Linux (reset by exec, unlike ru_maxrss, which
    keeps the peak of the process that exec'd this one), else ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import resource  # Unix only

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def analyze_rank_file(task: RankTask) -> RankResult | RankFailure:
    """The worker: load one rank's file, analyze it, run the rules, reduce to a RankResult."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        trace = load_file(task.path, progress=stderr_progress() if task.show_load else None,
                          max_bytes=task.max_bytes, captures=task.captures)
    except TraceFormatError as exc:
        return RankFailure(task.path, str(exc))
    # the loaded trace lives through the whole task: kept out of the collector's full passes while it runs
    # (unless the caller froze objects of its own, which unfreezing would release)
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        return _rank_result(task, trace, t0, c0)
    finally:
        if freeze:
            gc.unfreeze()


def _rank_result(task: RankTask, trace: Trace, t0: float, c0: float) -> RankResult:
    """Analyze a loaded rank file, run the rules and reduce to a RankResult."""
    rank = trace.rank()
    local = analyse_trace(trace, tokens_per_step=task.tokens_per_step, steps=task.steps, overhead=task.overhead)
    analysis, found = local.analysis, local.suggestions
    ra = analysis.ranks[0]
    digest = rank_digest(rank, ra, verdict=analysis.verdict, cause=analysis.cause)
    view = row = None
    if task.view:
        from tracekit.report.context import rank_view

        view = rank_view(analysis, list(found), tuple(trace.warnings), model=local.models[0] if local.models else None)
        row = view.row
    return RankResult(
        rank=int(rank.rank), path=str(rank.path), origin_us=int(rank.meta.origin_us),
        summary=rank_summary(analysis, ra), digest=digest, suggestions=found, view=view, row=row,
        warnings=local.warnings, seconds=time.perf_counter() - t0,
        cpu_seconds=time.process_time() - c0, peak_rss_kb=peak_rss_kb(),
        pid=os.getpid())


@dataclass(frozen=True)
class RunResult:
    """Every rank's compact result (by rank), the load warnings, and the cross-rank view."""

    path: str
    results: tuple[RankResult, ...]
    warnings: tuple[str, ...]
    cross: CrossRank | None  # two or more ranks
    cross_suggestions: tuple[Suggestion, ...] = ()

    @property
    def multi(self) -> bool:
        return len(self.results) > 1

    @cached_property
    def summary(self) -> AnalysisSummary:
        """The ranks' summaries added up (one rank: its own)."""
        return combine([r.summary for r in self.results])

    @cached_property
    def suggestions(self) -> tuple[RankedSuggestion, ...]:
        """The cross-rank rules' suggestions and every rank's, largest estimated saving first."""
        per_rank = [x for r in self.results for x in ranked(r.rank, r.suggestions)]
        return by_saving([*ranked(None, self.cross_suggestions), *per_rank])

    def to_dict(self) -> dict[str, Any]:
        """The `analyze --json` document: one rank's own, or the ranks' sum plus the cross-rank view."""
        return document(self.summary, self.suggestions, cross=self.cross, path=self.path, warnings=self.warnings)


def resolve_inputs(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The trace files behind a path, a directory, a glob, or a list of them, each file once
    (TraceFormatError if none)."""
    return list(collect_inputs(inputs).traces)


def display_path(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> str:
    if isinstance(inputs, (str, os.PathLike)):
        return str(inputs)
    items = [str(i) for i in inputs]
    return items[0] if len(items) == 1 else " ".join(items)


def run(inputs: str | os.PathLike | Sequence[str | os.PathLike], *, rank: int | None = None,
        jobs: int | None = None, scheduler: Scheduler = None, view: bool = False,
        tokens_per_step: float | None = None, steps: StepSelection | str = STEADY_STEPS, max_bytes: int | None = None,
        captures: Sequence[str] = (), progress: Progress | None = None,
        overhead: ProfilerOverhead = DEFAULT_OVERHEAD, keep_going: bool = False,
        scheduler_wait: float | None = None) -> RunResult:
    """Analyze every rank file of `inputs` (one worker task per file) and merge the compact results.

    `jobs`: local worker processes (default: the cores; 1: this process). `scheduler`: a Dask
    scheduler address or Client (then the tasks run on that cluster). `rank`: keep only that rank
    (files whose name states another rank are not even loaded). `view`: build report sections.
    `steps`: the headline steps, a StepSelection or its text (steady, all, N-M; StepsError before any
    work when malformed). `overhead`: the profiler's cost the model removes where a trace carries no
    unprofiled step times (default: DEFAULT_OVERHEAD; `tracekit calibrate`'s file: load_calibration).
    A rank whose worker process dies (a signal, out of memory) stops the run with a TracekitError
    naming its file and the signal; with `keep_going` it is skipped with a warning instead.
    `scheduler_wait`: seconds to wait for a scheduler's workers (tracekit.executor.scheduler_wait)."""
    selection = StepSelection.of(steps)
    found = collect_inputs(inputs, captures)
    paths = list(found.traces)
    if rank is not None:
        named = [p for p in paths if files.rank_from_name(p) == rank]
        paths = named or paths
    here = scheduler is None and (len(paths) == 1 or jobs == 1)  # the work runs in this process
    tasks = [RankTask(task_path(p, scheduler), tokens_per_step=tokens_per_step, view=view, steps=selection,
                      show_load=here and progress is not None, max_bytes=max_bytes,
                      captures=tuple(task_path(c, scheduler) for c in captures), overhead=overhead) for p in paths]
    outcomes: list[RankResult | RankFailure | None] = [None] * len(tasks)
    for index, outcome in run_tasks(analyze_rank_file, tasks, jobs=jobs, scheduler=scheduler, progress=progress,
                                    on_lost=lost_rank([t.path for t in tasks], keep_going),
                                    wait_s=scheduler_wait):
        outcomes[index] = outcome
    return merge(display_path(inputs), [o for o in outcomes if o is not None], rank=rank, notes=found.notes)


def task_path(path: str | os.PathLike, scheduler: Scheduler) -> str:
    """A path as a worker gets it: absolute for a Dask cluster (its workers run in other working
    directories), as given for local work."""
    return str(path) if scheduler is None else os.path.abspath(path)


def lost_rank(paths: Sequence[str], keep_going: bool) -> Callable[[int, str], RankFailure]:
    """What a task whose worker process died becomes: a RankFailure (skipped with a warning) with
    `keep_going`, else a TracekitError naming the file and how the worker ended."""
    def lost(index: int, reason: str) -> RankFailure:
        message = f"{paths[index]}: the worker process analysing it {reason}"
        if not keep_going:
            raise TracekitError(f"{message}; the run was stopped (--keep-going reports the other ranks)")
        return RankFailure(paths[index], message)
    return lost


def merge(path: str, outcomes: Sequence[RankResult | RankFailure], *, rank: int | None = None,
          notes: Sequence[str] = ()) -> RunResult:
    """Rank numbers made unique (as load_trace does), failures to warnings (after `notes`: inputs
    read once), the cross-rank view."""
    ok, failed = _readable(path, outcomes)
    warnings = [*notes, *failed]
    results: dict[int, RankResult] = {}
    for r in sorted(ok, key=lambda x: x.path):
        number = r.rank
        while number in results:
            number += 1
        results[number] = r if number == r.rank else r.renumbered(number)
    if rank is not None:
        if rank not in results:
            known = ", ".join(str(k) for k in sorted(results))
            raise TraceFormatError(f"{path}: no rank {rank} in this trace (ranks: {known})")
        results = {rank: results[rank]}
    ordered = tuple(results[k] for k in sorted(results))
    for r in ordered:
        warnings.extend(r.warnings)
    cross: CrossRank | None = None
    extra: tuple[Suggestion, ...] = ()
    if len(ordered) > 1:
        from tracekit.analyzers.ranks import cross_rank
        from tracekit.suggestions.rules import suggest_cross_rank

        cross = cross_rank([r.digest for r in ordered])
        extra = tuple(suggest_cross_rank(cross))  # the CROSS_RANK_RULES rows
    return RunResult(path=path, results=ordered, warnings=tuple(dict.fromkeys(warnings)), cross=cross,
                     cross_suggestions=extra)


def _readable(path: str, outcomes: Sequence[Outcome | RankFailure]) -> tuple[list[Outcome], list[str]]:
    """(the outcomes that are not failures, a warning per failure); TraceFormatError when all failed
    (the file's own message for one file), as load_trace does for a directory."""
    failures = [o for o in outcomes if isinstance(o, RankFailure)]
    ok = [o for o in outcomes if not isinstance(o, RankFailure)]
    if not ok:
        if len(outcomes) == 1:
            raise TraceFormatError(failures[0].message)
        raise TraceFormatError(f"{path}: none of the {len(outcomes)} files is a readable trace "
                               f"({'; '.join(f.message for f in failures[:3])})")
    return ok, [f"skipped {f.message}" for f in failures]
