"""`tracekit diff` through the pipeline: both traces analysed in this process, BEFORE's rules checked in AFTER."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

# the one import of the comparison in pipeline/ and cli/ (commands name TraceDiff from here)
from tracekit.analyzers.step_selection import STEADY_STEPS, StepSelection
from tracekit.compare.diff import TraceDiff, diff
from tracekit.pipeline.local import LocalResult, analyse_trace, load_file
from tracekit.trace.inputs import collect_inputs
from tracekit.trace.load import stderr_progress

__all__ = ["TraceDiff", "compare_files", "compare_results", "diff_inputs"]


def diff_inputs(before: str | os.PathLike, after: str | os.PathLike) -> tuple[Path, ...]:
    """Every file `diff BEFORE AFTER` reads (both sides' trace files and capture traces): its
    --html page may be none of them. TraceFormatError (one line) for a side that names nothing."""
    return (*collect_inputs(before).files, *collect_inputs(after).files)


def compare_results(before: LocalResult, after: LocalResult) -> TraceDiff:
    """The diff of two analysed traces, BEFORE's suggestions checked against what changed."""
    return diff(before.analysis, after.analysis, before.suggestions)


def compare_files(before: str | os.PathLike, after: str | os.PathLike, *, rank: int | None = None,
                  steps: StepSelection | str = STEADY_STEPS, show_load: bool = False,
                  warn: Callable[[str], None] | None = None) -> TraceDiff:
    """Load and analyse BEFORE, then AFTER (files or rank directories; only `rank` when given), run the
    rules on BEFORE, and diff them. `show_load`: loading progress on a terminal; `warn` gets each
    file's load warnings once it is loaded. StepsError when `steps` is malformed."""
    results = []
    for index, path in enumerate((before, after)):
        trace = load_file(path, progress=stderr_progress() if show_load else None)
        if warn is not None:
            for warning in trace.warnings:
                warn(warning)
        results.append(analyse_trace(trace, rank=rank, steps=steps, with_suggestions=index == 0))
    return compare_results(results[0], results[1])
