"""`tracekit info` over many files: one worker task per file, the ranks' counts merged by rank."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracekit.analyzers.graphs import GraphReplays
from tracekit.analyzers.trace_counts import RankCounts, TraceCounts, count_rank
from tracekit.errors import TraceFormatError
from tracekit.executor import Progress, Scheduler, run_tasks
from tracekit.pipeline.core import RankFailure, _readable, display_path, lost_rank, task_path
from tracekit.trace.inputs import collect_inputs
from tracekit.trace.load import load_trace


@dataclass(frozen=True)
class InfoTask:
    path: str
    top: int = 10
    max_bytes: int | None = None
    captures: tuple[str, ...] = ()


def summarize_file(task: InfoTask) -> tuple[RankCounts, tuple[str, ...], GraphReplays | None] | RankFailure:
    """The worker of `tracekit info`: (the rank's counts, load warnings, its CUDA-graph replays or
    None) of one file."""
    from tracekit.analyzers.devices import match_device
    from tracekit.analyzers.graphs import graph_replays
    from tracekit.analyzers.tracefacts import device_label, trace_facts

    try:
        trace = load_trace(task.path, max_bytes=task.max_bytes, captures=task.captures)
    except TraceFormatError as exc:
        return RankFailure(task.path, str(exc))
    rank = trace.rank()
    graphs = graph_replays(rank)
    counts = count_rank(rank, task.top)
    if rank.has_gpu:  # one device name for every command: the device table's, with the memory reported
        counts = dataclasses.replace(counts, device=device_label(match_device(rank.meta), trace_facts(rank)))
    if graphs is not None:  # the per-row replay mask stays in the worker
        graphs = dataclasses.replace(graphs, replayed=np.zeros(0, dtype=bool))
    return counts, tuple(trace.warnings), graphs


def summaries(inputs: str | os.PathLike | Sequence[str | os.PathLike], *, top: int = 10,
              jobs: int | None = None, scheduler: Scheduler = None, max_bytes: int | None = None,
              captures: Sequence[str] = (), progress: Progress | None = None, keep_going: bool = False,
              scheduler_wait: float | None = None) -> TraceCounts:
    """Every file's counts (by rank), the warnings, and the graph replays of `inputs`, one task per file
    (`keep_going`, `scheduler_wait`: as for tracekit.pipeline.run)."""
    found = collect_inputs(inputs, captures)
    tasks = [InfoTask(task_path(p, scheduler), top, max_bytes, tuple(task_path(c, scheduler) for c in captures))
             for p in found.traces]
    outcomes: list[tuple[RankCounts, tuple[str, ...], GraphReplays | None] | RankFailure | None] = [None] * len(tasks)
    for index, outcome in run_tasks(summarize_file, tasks, jobs=jobs, scheduler=scheduler, progress=progress,
                                    on_lost=lost_rank([t.path for t in tasks], keep_going), wait_s=scheduler_wait):
        outcomes[index] = outcome
    ok, failed = _readable(display_path(inputs), [o for o in outcomes if o is not None])
    warnings = [*found.notes, *failed]
    out: dict[int, RankCounts] = {}
    replays: dict[int, GraphReplays] = {}
    for counts, notes, graphs in sorted(ok, key=lambda x: x[0].path):
        number = counts.rank
        while number in out:
            number += 1
        out[number] = dataclasses.replace(counts, rank=number)
        if graphs is not None:
            replays[number] = graphs
        warnings.extend(notes)
    return TraceCounts(path=display_path(inputs), ranks=tuple(out[k] for k in sorted(out)),
                       warnings=tuple(dict.fromkeys(warnings)), graphs=tuple(replays[k] for k in sorted(replays)))
