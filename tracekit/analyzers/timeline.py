"""The binned timeline of a rank: busy share and the longest-running kernel per bin, per GPU stream."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.step_plan import StepPlan
from tracekit.analyzers.timeline_detail import TimelineDetail, timeline_detail
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace

TIMELINE_BINS = 2400  # fine bins over the whole rank; the report merges them to pixels at any zoom
MAX_STREAM_ROWS = 12  # busiest streams get their own row; the rest are merged into one
NO_KERNEL = -1  # index in Timeline.names of a bin where nothing ran


@dataclass(frozen=True)
class TimelineRow:
    """One strip: busy share (0..1) and the index of the longest-running name in each bin."""

    label: str
    kind: str  # 'gpu' (all streams), 'stream', 'cpu' (launch calls)
    busy: tuple[float, ...]
    top: tuple[int, ...]  # index into Timeline.names, NO_KERNEL where idle
    busy_us: float  # union of the row's intervals


@dataclass(frozen=True)
class StepMark:
    step: int
    start_us: float  # relative to Timeline.t0_us
    end_us: float
    phase: str  # the step's phase (tracekit.analyzers.steady.PHASES)


@dataclass(frozen=True)
class Timeline:
    """Fixed-width bins from t0_us (trace clock) over span_us, one row per stream; steps as marks."""

    t0_us: float
    span_us: float
    bin_us: float
    rows: tuple[TimelineRow, ...]
    steps: tuple[StepMark, ...]
    names: tuple[str, ...]  # kernel names (as in the trace) or kernel classes of the cpu row
    classes: tuple[str, ...]  # class of each name ('' when unknown), aligned with names
    detail: TimelineDetail | None = None  # each activity of the first steady steps, for zooms below a few ms


def _top_per_bin(ts: np.ndarray, end: np.ndarray, codes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """For each bin, the code with the most time inside it (NO_KERNEL where nothing ran)."""
    n = len(edges) - 1
    out = np.full(n, NO_KERNEL, dtype=np.int64)
    if len(ts) == 0:
        return out
    first = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, n - 1)
    last = np.clip(np.searchsorted(edges, np.maximum(end, ts), side="left") - 1, first, n - 1)
    spans = last - first + 1
    rows = np.repeat(np.arange(len(ts)), spans)
    bins = first[rows] + (np.arange(len(rows)) - np.repeat(np.cumsum(spans) - spans, spans))
    inside = np.minimum(end[rows], edges[bins + 1]) - np.maximum(ts[rows], edges[bins])
    frame = pd.DataFrame({"bin": bins, "code": codes[rows], "t": np.maximum(inside, 0.0) + 1e-9})
    summed = frame.groupby(["bin", "code"], sort=False)["t"].sum().reset_index()
    best = summed.sort_values("t", ascending=False, kind="stable").drop_duplicates("bin")
    out[best["bin"].to_numpy()] = best["code"].to_numpy()
    return out


def _share(x: float) -> float:
    """A busy share to 3 decimals that never rounds work away: any busy bin keeps at least 0.001."""
    return max(round(x, 3), 0.001) if x > 1e-9 else 0.0


def _row(label: str, kind: str, ts: np.ndarray, end: np.ndarray, codes: np.ndarray, edges: np.ndarray) -> TimelineRow:
    s, e = merge_intervals(ts, end)
    busy = busy_in_windows(s, e, edges[:-1], edges[1:]) / np.diff(edges)
    return TimelineRow(
        label=label,
        kind=kind,
        busy=tuple(_share(float(x)) for x in np.clip(busy, 0.0, 1.0)),
        top=tuple(int(x) for x in _top_per_bin(ts, end, codes, edges)),
        busy_us=float((e - s).sum()),
    )


def _marks(plan: StepPlan | None, t0: float) -> tuple[StepMark, ...]:
    if plan is None:
        return ()
    windows = plan.windows
    return tuple(
        StepMark(step=int(n), start_us=float(a) - t0, end_us=float(b) - t0, phase=p.phase)
        for n, a, b, p in zip(windows.numbers, windows.ts, windows.end, plan.phases, strict=True)
        if int(n) >= 0
    )


def timeline(rank: RankTrace, plan: StepPlan | None = None, classes: pd.Series | None = None,
             bins: int = TIMELINE_BINS) -> Timeline | None:
    """Busy share and top kernel per bin for all streams, each busy stream and the CPU launch calls.

    `plan` gives the step marks (window and phase; none without it); `classes` the kernel class of
    each rank.gpu row. None when the rank has no GPU activity.
    """
    gpu = rank.gpu
    if not len(gpu):
        return None
    rt = rank.runtime
    launches = rt[rt[tables.RT_KIND].isin(tables.LAUNCH_KINDS)] if len(rt) and tables.RT_KIND in rt else rt.iloc[:0]
    t0 = float(gpu[tables.GPU_TS].min())
    t1 = float(gpu[tables.GPU_END].max())
    if len(launches):
        t0, t1 = min(t0, float(launches[tables.RT_TS].min())), max(t1, float(launches[tables.RT_END].max()))
    if plan is not None and len(plan):
        t0, t1 = min(t0, float(plan.windows.ts.min())), max(t1, float(plan.windows.end.max()))
    t1 = max(t1, t0 + 1.0)
    edges = np.linspace(t0, t1, bins + 1)
    names, codes = np.unique(gpu[tables.GPU_NAME].astype(str).to_numpy(), return_inverse=True)
    cls = classes.astype(str).to_numpy() if classes is not None else np.full(len(gpu), "", dtype=object)
    name_class = pd.Series(cls).groupby(codes).first()
    ts, end = gpu[tables.GPU_TS].to_numpy(float), gpu[tables.GPU_END].to_numpy(float)
    stream = gpu[tables.GPU_STREAM].to_numpy()
    rows = [_row("GPU (all streams)", "gpu", ts, end, codes, edges)]
    order = pd.Series(end - ts).groupby(stream).sum().sort_values(ascending=False).index.tolist()
    stream_row = {s: i + 1 for i, s in enumerate(order[:MAX_STREAM_ROWS])} if len(order) > 1 else {}
    detail = timeline_detail(rank, plan, t0, stream_row, len(stream_row) + 1 if len(order) > MAX_STREAM_ROWS else 0)
    if len(order) > 1:
        for s in order[:MAX_STREAM_ROWS]:
            m = stream == s
            rows.append(_row(f"stream {s}", "stream", ts[m], end[m], codes[m], edges))
        rest = order[MAX_STREAM_ROWS:]
        if rest:
            m = np.isin(stream, rest)
            rows.append(_row(f"{len(rest)} other streams", "stream", ts[m], end[m], codes[m], edges))
    all_names = [str(n) for n in names]
    all_classes = [str(name_class.get(i, "")) for i in range(len(names))]
    if len(launches):
        lnames, lcodes = np.unique(launches[tables.RT_NAME].astype(str).to_numpy(), return_inverse=True)
        offset = len(all_names)
        all_names += [str(n) for n in lnames]
        all_classes += ["launch"] * len(lnames)
        rows.append(_row("CPU launch calls", "cpu", launches[tables.RT_TS].to_numpy(float),
                         launches[tables.RT_END].to_numpy(float), lcodes + offset, edges))
    return Timeline(t0_us=t0, span_us=t1 - t0, bin_us=(t1 - t0) / bins, rows=tuple(rows),
                    steps=_marks(plan, t0), names=tuple(all_names), classes=tuple(all_classes), detail=detail)


MAX_QUEUE_POINTS = 20_000  # above this, the depth is kept as the maximum per bin


@dataclass(frozen=True)
class QueueDepth:
    """Launched-but-not-started GPU activities over time (trace clock, µs): the depth from each ts on."""

    ts: tuple[float, ...]
    depth: tuple[int, ...]


def launch_queue_depth(rank: RankTrace) -> QueueDepth:
    """How many GPU activities have been launched (their launch call ended) and not started yet."""
    gpu, rt = rank.gpu, rank.runtime
    if not len(gpu) or not len(rt):
        return QueueDepth((), ())
    pos = gpu[tables.GPU_LAUNCH].to_numpy()
    linked = pos >= 0
    if not linked.any():
        return QueueDepth((), ())
    issued = rt[tables.RT_END].to_numpy(float)[pos[linked]]
    start = gpu[tables.GPU_TS].to_numpy(float)[linked]
    issued = np.minimum(issued, start)  # clock skew: never a negative wait
    times = np.concatenate([issued, start])
    steps = np.concatenate([np.ones(len(issued), dtype=np.int64), -np.ones(len(start), dtype=np.int64)])
    order = np.lexsort((steps, times))  # at a tie the start (-1) comes first
    times, depth = times[order], np.cumsum(steps[order])
    last = np.append(times[1:] != times[:-1], True)  # one value per distinct time
    times, depth = times[last], depth[last]
    if len(times) > MAX_QUEUE_POINTS:
        edges = np.linspace(times[0], times[-1], MAX_QUEUE_POINTS + 1)
        idx = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, MAX_QUEUE_POINTS - 1)
        peak = pd.Series(depth).groupby(idx).max()
        times, depth = edges[peak.index.to_numpy()], peak.to_numpy()
    return QueueDepth(tuple(float(t) for t in times), tuple(int(d) for d in depth))
