"""Each GPU activity and CPU launch/op span of a few steady steps, compact, for the timeline zoomed below a few ms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tracekit.analyzers.step_plan import StepPlan
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MAX_ACTIVITIES = 2_500  # GPU activities embedded (whole steps from the first steady one; the first step cut
MAX_OPS = 2_500  # to its first ones when alone it has more): the report of a 100k-kernel trace stays under 1.5 MB


@dataclass(frozen=True)
class TimelineDetail:
    """Activities of `steps`, start-sorted; times in µs after the timeline's t0. Index arrays point
    into `names` (kernel, op and launch-call names) and `shapes` (-1: none)."""

    steps: tuple[int, ...]
    start_us: float  # what the detail covers
    end_us: float
    names: tuple[str, ...]
    shapes: tuple[str, ...]
    gpu_ts: np.ndarray = field(repr=False, compare=False)
    gpu_dur: np.ndarray = field(repr=False, compare=False)
    gpu_row: np.ndarray = field(repr=False, compare=False)  # the timeline row of its stream
    gpu_name: np.ndarray = field(repr=False, compare=False)
    gpu_op: np.ndarray = field(repr=False, compare=False)  # the launching op's name (-1: none)
    gpu_shape: np.ndarray = field(repr=False, compare=False)  # that op's input shapes (-1: none)
    gpu_delay: np.ndarray = field(repr=False, compare=False)  # start - end of its launch call, µs (NaN: no launch)
    launch_ts: np.ndarray = field(repr=False, compare=False)
    launch_dur: np.ndarray = field(repr=False, compare=False)
    launch_name: np.ndarray = field(repr=False, compare=False)
    op_ts: np.ndarray = field(repr=False, compare=False)  # top-level CPU ops
    op_dur: np.ndarray = field(repr=False, compare=False)
    op_name: np.ndarray = field(repr=False, compare=False)


def _shape_text(dims: object) -> str:
    if not isinstance(dims, (list, tuple)):
        return ""
    parts = ["×".join(str(x) for x in d) if isinstance(d, (list, tuple)) else str(d) for d in dims]
    return ", ".join(p for p in parts if p)


def _codes(values: list[str], names: dict[str, int]) -> np.ndarray:
    return np.array([names.setdefault(v, len(names)) for v in values], dtype=np.int64)


def timeline_detail(rank: RankTrace, plan: StepPlan | None, t0: float, stream_row: Mapping[object, int],
                    other_row: int, max_activities: int = MAX_ACTIVITIES) -> TimelineDetail | None:
    """The detail of the first steady steps whose activities fit `max_activities` (at least one step);
    `stream_row` maps a stream to its timeline row (others: `other_row`). None without steps or GPU work."""
    gpu = rank.gpu
    if plan is None or not len(plan) or not len(gpu) or plan.scope == "trace":
        return None
    w = plan.windows
    steady = [i for i, p in enumerate(plan.phases) if p.steady] or list(range(len(w)))
    counts = np.bincount(w.gpu_pos[w.gpu_pos >= 0], minlength=len(w))
    chosen: list[int] = []
    total = 0
    for i in range(steady[0], len(w)):
        if chosen and total + counts[i] > max_activities:
            break
        chosen.append(i)
        total += int(counts[i])
    lo, hi = float(w.ts[chosen[0]]), float(w.end[chosen[-1]])
    rows = np.flatnonzero(np.isin(w.gpu_pos, chosen))
    g = gpu.iloc[rows]
    order = np.argsort(g[tables.GPU_TS].to_numpy(float), kind="stable")
    g = g.iloc[order]
    if len(g) > max_activities:  # one step with more: its first activities, up to where the next one starts
        hi = float(g[tables.GPU_TS].iloc[max_activities])
        g = g.iloc[:max_activities]
    names: dict[str, int] = {}
    shapes: dict[str, int] = {}
    ops, rt = rank.ops, rank.runtime
    op_row = g[tables.GPU_OP].to_numpy()
    op_names = ops[tables.OP_NAME].astype(str).to_numpy() if len(ops) else np.zeros(0, dtype=object)
    gpu_op = np.array([names.setdefault(str(op_names[o]), len(names)) if o >= 0 else -1 for o in op_row.tolist()],
                      dtype=np.int64)
    gpu_shape = np.full(len(g), -1, dtype=np.int64)
    linked = np.flatnonzero(op_row >= 0)
    texts: dict[int, str] = {}  # by the identity of the dims (equal recorded values are one object)
    for j, dims in zip(linked.tolist(), rank.input_values(op_row[linked], tables.OP_INPUT_DIMS), strict=True):
        text = texts.get(id(dims))
        if text is None:
            text = texts[id(dims)] = _shape_text(dims)
        if text:
            gpu_shape[j] = shapes.setdefault(text, len(shapes))
    launch = g[tables.GPU_LAUNCH].to_numpy()
    rt_end = rt[tables.RT_END].to_numpy(float) if len(rt) else np.zeros(0)
    start = g[tables.GPU_TS].to_numpy(float)
    delay = np.where(launch >= 0, start - (rt_end[np.maximum(launch, 0)] if len(rt) else 0.0), np.nan)
    stream = g[tables.GPU_STREAM].to_numpy()
    calls = rt.iloc[np.unique(launch[launch >= 0])] if len(rt) else rt
    top = ops[(ops[tables.OP_PARENT].to_numpy() < 0) & (ops[tables.OP_TS].to_numpy(float) >= lo)
              & (ops[tables.OP_TS].to_numpy(float) < hi)].head(MAX_OPS) if len(ops) else ops
    gpu_name = _codes(g[tables.GPU_NAME].astype(str).tolist(), names)
    launch_name = _codes(calls[tables.RT_NAME].astype(str).tolist(), names)
    top_name = _codes(top[tables.OP_NAME].astype(str).tolist(), names)
    return TimelineDetail(
        steps=tuple(int(w.numbers[i]) for i in chosen), start_us=lo - t0, end_us=hi - t0,
        names=tuple(names), shapes=tuple(shapes),
        gpu_ts=start - t0, gpu_dur=g[tables.GPU_DUR].to_numpy(float),
        gpu_row=np.array([stream_row.get(s, other_row) for s in stream.tolist()], dtype=np.int64),
        gpu_name=gpu_name, gpu_op=gpu_op, gpu_shape=gpu_shape, gpu_delay=delay,
        launch_ts=calls[tables.RT_TS].to_numpy(float) - t0, launch_dur=calls[tables.RT_DUR].to_numpy(float),
        launch_name=launch_name,
        op_ts=top[tables.OP_TS].to_numpy(float) - t0, op_dur=top[tables.OP_DUR].to_numpy(float), op_name=top_name,
    )
