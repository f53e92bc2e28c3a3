"""The pipeline's in-memory entry point: load -> analyze -> suggest of one trace in this process, whole Analysis kept."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.analyzers.analysis import Analysis, analyze
from tracekit.analyzers.step_selection import STEADY_STEPS, StepSelection
from tracekit.model.outlook import RankModel, rank_model
from tracekit.model.projection import DEFAULT_OVERHEAD, ProfilerOverhead
from tracekit.suggestions import Suggestion
from tracekit.suggestions.rules import suggest_checked
from tracekit.trace.load import Progress, load_trace
from tracekit.trace.model import Trace


@dataclass(frozen=True)
class LocalResult:
    """One loaded trace's Analysis (every rank combined, or the rank asked for) and its suggestions.

    `tracekit.pipeline.run` spreads ranks over workers and keeps compact results; this keeps the whole
    Analysis, for `diff`, `export`, `profile --try`, a profiled run's `.analysis` and the Python API."""

    path: str  # the loaded Trace's path
    warnings: tuple[str, ...]  # what loading it warned about
    analysis: Analysis
    suggestions: tuple[Suggestion, ...]  # () when the rules were not run
    models: tuple[RankModel, ...] = ()  # each analysed rank's execution model (tracekit.model)


def load_file(path: str | os.PathLike, *, max_bytes: int | None = None, captures: Sequence[str | os.PathLike] = (),
              progress: Progress | None = None) -> Trace:
    """`load_trace`; a progress line (tracekit.trace.load.stderr_progress) is cleared once loaded."""
    try:
        return load_trace(path, progress=progress, max_bytes=max_bytes, captures=captures)
    finally:
        if progress is not None:
            sys.stderr.write("\r\x1b[K")


def bare_steps(trace: Trace, rank: int) -> dict[int, float] | None:
    """The unprofiled step times (µs by step number) the rank's file carries, if any."""
    bare = trace.rank(rank).meta.bare
    return dict(bare.step_us) if bare is not None else None


def model_ranks(trace: Trace, analysis: Analysis, overhead: ProfilerOverhead = DEFAULT_OVERHEAD,
                use_bare: bool = True) -> tuple[RankModel, ...]:
    """The execution model of every analysed rank (tracekit.model.outlook.rank_model), calibrated by
    the file's bare steps unless use_bare=False (then `overhead` only: the untuned projection)."""
    return tuple(rank_model(trace.rank(r.rank), r.launch, overhead, bare_steps(trace, r.rank) if use_bare else None)
                 for r in analysis.ranks)


def analyse_trace(trace: Trace, *, rank: int | None = None, steps: StepSelection | str = STEADY_STEPS,
                  tokens_per_step: float | None = None, with_suggestions: bool = True,
                  overhead: ProfilerOverhead = DEFAULT_OVERHEAD, use_bare: bool = True) -> LocalResult:
    """Analyze an already loaded `trace` (every rank combined, or only `rank`), model its steady steps
    without the profiler (`overhead`: the profiler cost when the trace carries no bare timings, or
    always with use_bare=False) and run the rules on it.

    `steps` picks the headline steps (steady, all, N-M; StepsError when malformed)."""
    analysis = analyze(trace, rank=rank, tokens_per_step=tokens_per_step, steps=steps)
    models = model_ranks(trace, analysis, overhead, use_bare)
    analysis = analysis.with_model({m.rank: m.unprofiled for m in models})
    found, failed = suggest_checked(analysis, models=models) if with_suggestions else ([], ())
    rank_failures = tuple(w for r in analysis.ranks for w in r.failures)
    if failed:  # a rule or the pricing hit a tracekit bug: the report says so beside what it left out
        analysis = dataclasses.replace(analysis, warnings=tuple(dict.fromkeys((*analysis.warnings, *failed))))
    return LocalResult(path=str(trace.path), warnings=(*(str(w) for w in trace.warnings), *rank_failures, *failed),
                       analysis=analysis, suggestions=tuple(found), models=models)


def analyse_file(path: str | os.PathLike, *, rank: int | None = None, steps: StepSelection | str = STEADY_STEPS,
                 tokens_per_step: float | None = None, max_bytes: int | None = None,
                 captures: Sequence[str | os.PathLike] = (), progress: Progress | None = None,
                 with_suggestions: bool = True) -> LocalResult:
    """Load the trace at `path` (a file or a directory of ranks), analyze it and run the rules."""
    trace = load_file(path, max_bytes=max_bytes, captures=captures, progress=progress)
    return analyse_trace(trace, rank=rank, steps=steps, tokens_per_step=tokens_per_step,
                         with_suggestions=with_suggestions)


def analyse_ranks(trace: Trace, *, rank: int | None = None, steps: StepSelection | str = STEADY_STEPS) -> dict[int, LocalResult]:
    """{rank: LocalResult} of every rank of a loaded `trace` (one Analysis each), or only `rank`."""
    ranks = [trace.rank(rank).rank] if rank is not None else sorted(trace.ranks)
    return {number: analyse_trace(trace, rank=number, steps=steps) for number in ranks}
