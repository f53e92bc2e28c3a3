"""`tracekit info` over many files: one worker task per file, summaries merged by rank, the info document."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.errors import TraceFormatError
from tracekit.executor import Progress, Scheduler, run_tasks
from tracekit.pipeline import RankFailure, _readable, display_path, resolve_inputs
from tracekit.trace.load import load_trace
from tracekit.trace.summary import RankSummary


@dataclass(frozen=True)
class InfoTask:
    path: str
    top: int = 10
    max_bytes: int | None = None
    captures: tuple[str, ...] = ()


def summarize_file(task: InfoTask) -> tuple[RankSummary, tuple[str, ...], tuple[dict, str] | None] | RankFailure:
    """The worker of `tracekit info`: (RankSummary, load warnings, its CUDA-graph replays as
    (JSON, text line) or None) of one file."""
    from tracekit.analyzers.devices import match_device
    from tracekit.analyzers.graphs import graph_replays
    from tracekit.analyzers.tracefacts import device_label, trace_facts
    from tracekit.trace.summary import summarize_rank

    try:
        trace = load_trace(task.path, max_bytes=task.max_bytes, captures=task.captures)
    except TraceFormatError as exc:
        return RankFailure(task.path, str(exc))
    rank = trace.rank()
    graphs = graph_replays(rank)
    summary = summarize_rank(rank, task.top)
    if rank.has_gpu:  # one device name for every command: the device table's, with the memory reported
        summary = dataclasses.replace(summary, device=device_label(match_device(rank.meta), trace_facts(rank)))
    return (summary, tuple(trace.warnings),
            (graphs.to_dict(), graphs.line()) if graphs is not None else None)


def summaries(inputs: str | os.PathLike | Sequence[str | os.PathLike], *, top: int = 10,
              jobs: int | None = None, scheduler: Scheduler = None, max_bytes: int | None = None,
              captures: Sequence[str] = (), progress: Progress | None = None
              ) -> tuple[list[RankSummary], tuple[str, ...], list[tuple[dict, str]]]:
    """([RankSummary] by rank, warnings, graph replays) of every file of `inputs`, one task per file."""
    tasks = [InfoTask(str(p), top, max_bytes, tuple(str(c) for c in captures)) for p in resolve_inputs(inputs)]
    outcomes: list[Any] = [None] * len(tasks)
    for index, outcome in run_tasks(summarize_file, tasks, jobs=jobs, scheduler=scheduler, progress=progress):
        outcomes[index] = outcome
    ok, warnings = _readable(display_path(inputs), outcomes)
    out: dict[int, RankSummary] = {}
    replays: dict[int, tuple[dict, str]] = {}
    for summary, notes, graphs in sorted(ok, key=lambda x: x[0].path):
        number = summary.rank
        while number in out:
            number += 1
        out[number] = dataclasses.replace(summary, rank=number)
        if graphs is not None:
            replays[number] = graphs
        warnings.extend(notes)
    return [out[k] for k in sorted(out)], tuple(dict.fromkeys(warnings)), [replays[k] for k in sorted(replays)]


INFO_SCHEMA = "tracekit.info/1"
COUNT_KEYS = ("events", "kernels", "memcpy", "memset", "cpu_ops", "launches",
              "kernels_linked_to_launch", "kernels_linked_to_op")


def info_dict(path: str, summaries: Sequence[RankSummary], warnings: tuple[str, ...],
              device: str | None = None) -> dict:
    """The `info --json` object: totals over ranks at the top, one entry per rank below.

    `device` is the one device name every command shows (tracefacts.device_label); without it, the
    name the trace gives."""
    out: dict = {"schema": INFO_SCHEMA, "path": path, "ranks": [s.rank for s in summaries],
                 "device": device or next((s.device for s in summaries if s.device), None),
                 "platform": summaries[0].platform}
    for key in COUNT_KEYS:
        out[key] = sum(getattr(s, key) for s in summaries)
    out["gpu_busy_us"] = round(sum(s.gpu_busy_us for s in summaries), 3)
    out["span_us"] = round(max(s.span_us for s in summaries), 3)
    out["steps"] = max(s.steps for s in summaries)
    out["cpu_only"] = all(s.kernels + s.memcpy + s.memset == 0 for s in summaries)
    out["skipped_events"] = sum(s.skipped for s in summaries)
    out["per_rank"] = [_rank_dict(s) for s in summaries]
    out["warnings"] = list(warnings)
    return out


def _rank_dict(s: RankSummary) -> dict:
    d = {"rank": s.rank, "path": s.path, "device": s.device, "platform": s.platform}
    d.update({k: getattr(s, k) for k in COUNT_KEYS})
    d.update(gpu_busy_us=round(s.gpu_busy_us, 3), span_us=round(s.span_us, 3), steps=s.steps,
             top_kernels=[{"name": r.name, "count": int(r.count), "time_us": round(float(r.time_us), 3),
                           "share": round(float(r.share), 4)} for r in s.top_kernels.itertuples()])
    return d
