"""Launch overhead vs GPU time per step: launches, CPU launch time, GPU busy/idle, queue delay, verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace import tables as T
from tracekit.trace.intervals import busy_in_windows, intervals, merge_intervals
from tracekit.trace.summary import span_us

# Verdict thresholds (see `verdict` and `launch_overhead`).
GPU_BOUND_UTIL = 0.80  # gpu-bound: GPU busy >= 80 % of the span
LAUNCH_BOUND_UTIL = 0.50  # launch-bound needs GPU busy < 50 % of the span, and either
LAUNCH_BOUND_CPU_RATIO = 0.50  # CPU time in launch calls >= 50 % of GPU busy time, or
LAUNCH_BOUND_SHORT_SHARE = 0.50  # >= 50 % of kernels shorter than their own launch call
KERNEL_WAIT_US = 30.0  # idle gaps below this between already-launched kernels are "kernel wait" (HTA)

CPU_ONLY = "cpu-only"
GPU_BOUND = "gpu-bound"
LAUNCH_BOUND = "launch-bound"
MIXED = "mixed"
VERDICTS = (LAUNCH_BOUND, GPU_BOUND, MIXED, CPU_ONLY)

HOST_WAIT = "host_wait"
KERNEL_WAIT = "kernel_wait"
OTHER_WAIT = "other"
NO_GAP = ""  # first activity on its stream

# --- columns of LaunchOverhead.activities (one row per GPU activity, same positions as rank.gpu) --
A_STEP = "step"
A_STREAM = "stream"
A_KIND = "kind"
A_DUR = "dur"
A_LAUNCH_US = "launch_us"  # duration of the launch call, NaN if unlinked
A_QUEUE_US = "queue_us"  # start - launch end, clipped at 0; NaN if unlinked
A_GAP_US = "gap_us"  # idle gap before it on its stream; NaN for the first one
A_IDLE = "idle_category"  # HOST_WAIT, KERNEL_WAIT, OTHER_WAIT or NO_GAP
A_SHORT = "short"  # kernel shorter than its own kernel-launch call

# --- columns of LaunchOverhead.streams -----------------------------------------------------------
S_STREAM = "stream"
S_ACTIVITIES = "activities"
S_BUSY_US = "busy_us"  # summed durations on the stream
S_IDLE_US = "idle_us"
S_HOST_WAIT_US = "host_wait_us"
S_KERNEL_WAIT_US = "kernel_wait_us"
S_OTHER_US = "other_us"

# --- columns of LaunchOverhead.apis ----------------------------------------------------------------
API_NAME = "name"
API_KIND = "kind"
API_COUNT = "count"
API_TIME_US = "time_us"


@dataclass(frozen=True)
class LaunchTotals:
    """Additive launch numbers of one step, one rank, or several ranks (``a + b``)."""

    steps: int = 0
    kernels: int = 0
    gpu_ops: int = 0  # kernels + memcpy + memset
    launches: int = 0
    cpu_launch_us: float = 0.0
    syncs: int = 0
    sync_us: float = 0.0
    span_us: float = 0.0
    gpu_busy_us: float = 0.0
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_idle_us: float = 0.0
    short_kernels: int = 0

    def __add__(self, other: LaunchTotals) -> LaunchTotals:
        return LaunchTotals(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                               for f in fields(self)})

    @property
    def gpu_idle_us(self) -> float:
        return max(self.span_us - self.gpu_busy_us, 0.0)

    @property
    def gpu_util(self) -> float | None:
        return self.gpu_busy_us / self.span_us if self.span_us > 0 else None

    @property
    def kernels_per_step(self) -> float | None:
        return self.kernels / self.steps if self.steps else None

    @property
    def verdict(self) -> str:
        return verdict(self)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        out.update(gpu_idle_us=self.gpu_idle_us, gpu_util=self.gpu_util,
                   kernels_per_step=self.kernels_per_step, verdict=self.verdict)
        return out


@dataclass(frozen=True)
class QueueStats:
    """Queue delay distribution (µs) over GPU activities with a linked launch."""

    count: int
    p50_us: float | None
    p90_us: float | None
    max_us: float | None

    @staticmethod
    def of(values: np.ndarray) -> QueueStats:
        v = values[~np.isnan(values)]
        if len(v) == 0:
            return QueueStats(0, None, None, None)
        p50, p90 = np.percentile(v, [50, 90])
        return QueueStats(len(v), float(p50), float(p90), float(v.max()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(t: LaunchTotals) -> str:
    """launch-bound / gpu-bound / mixed / cpu-only from additive totals (see launch_overhead)."""
    if t.gpu_ops == 0:
        return CPU_ONLY
    util = t.gpu_util
    if util is None or util >= GPU_BOUND_UTIL:
        return GPU_BOUND
    if util < LAUNCH_BOUND_UTIL:
        cpu_ratio = t.cpu_launch_us / t.gpu_busy_us if t.gpu_busy_us > 0 else float("inf")
        short_share = t.short_kernels / t.kernels if t.kernels else 0.0
        if cpu_ratio >= LAUNCH_BOUND_CPU_RATIO or short_share >= LAUNCH_BOUND_SHORT_SHARE:
            return LAUNCH_BOUND
    return MIXED


@dataclass(frozen=True)
class LaunchOverhead:
    """Launch overhead of one rank: per-step table, per-stream idle table, per-activity detail."""

    rank: int
    scope: str  # 'steps' (ProfilerStep windows) or 'trace' (one pseudo-step, number -1)
    steps: pd.DataFrame  # one row per step: "step", "ts", "end", the LaunchTotals fields, queue
    streams: pd.DataFrame  # S_* columns, one row per stream
    activities: pd.DataFrame  # A_* columns, aligned with rank.gpu positions
    apis: pd.DataFrame  # API_* columns: launch and sync calls inside the steps, by name
    totals: LaunchTotals
    queue: QueueStats
    step_totals: tuple[LaunchTotals, ...]

    @property
    def verdict(self) -> str:
        return self.totals.verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "scope": self.scope,
            "summary": {**self.totals.to_dict(), **_queue_fields(self.queue)},
            "steps": step_records(self),
            "streams": [{k: _py(v) for k, v in r.items()} for r in self.streams.to_dict("records")],
            "apis": [{k: _py(v) for k, v in r.items()} for r in self.apis.to_dict("records")],
        }


def step_records(lo: LaunchOverhead) -> list[dict[str, Any]]:
    """Per-step rows as JSON-ready dicts (numbers, verdict, queue delay)."""
    out = []
    for row, totals in zip(lo.steps.to_dict("records"), lo.step_totals, strict=True):
        rec = {"rank": lo.rank, "step": int(row["step"]), **totals.to_dict()}
        rec.update({k: _py(row[k]) for k in ("queue_p50_us", "queue_p90_us", "queue_max_us")})
        rec.pop("steps", None)
        out.append(rec)
    return out


def _queue_fields(q: QueueStats) -> dict[str, Any]:
    return {"queue_p50_us": q.p50_us, "queue_p90_us": q.p90_us, "queue_max_us": q.max_us}


def _py(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    return v


def _windows(rank) -> tuple[pd.DataFrame, str]:
    """Step windows (step, ts, end) and the scope name."""
    gpu, steps = rank.gpu, rank.steps
    if len(steps):
        s0, s1 = intervals(steps)
        w = pd.DataFrame({"step": steps[T.STEP_NUMBER].to_numpy(), "ts": s0, "end": s1})
        last = len(w) - 1
        mine = (gpu[T.GPU_STEP] == w.at[last, "step"]).to_numpy()
        if mine.any():
            w.at[last, "end"] = max(w.at[last, "end"], float(gpu[T.GPU_END].to_numpy(dtype=float)[mine].max()))
        return w, "steps"
    starts = [float(t["ts"].min()) for t in (gpu, rank.runtime, rank.ops, rank.annotations) if len(t)]
    t0 = min(starts) if starts else 0.0
    t1 = t0 + span_us(rank)  # the same span `tracekit info` shows
    return pd.DataFrame({"step": [-1], "ts": [t0], "end": [t1]}), "trace"


def _activities(rank, kernel_wait_us: float) -> pd.DataFrame:
    gpu, rt = rank.gpu, rank.runtime
    n = len(gpu)
    launch = gpu[T.GPU_LAUNCH].to_numpy()
    linked = launch >= 0
    safe = np.maximum(launch, 0)
    has_rt = len(rt) > 0
    rt_start, rt_stop = intervals(rt)
    rt_ts = rt_start[safe] if has_rt else np.zeros(n)
    rt_end = rt_stop[safe] if has_rt else np.zeros(n)
    rt_dur = rt[T.RT_DUR].to_numpy(dtype=float)[safe] if has_rt else np.zeros(n)
    rt_kind = rt[T.RT_KIND].to_numpy(dtype=object)[safe] if has_rt else np.full(n, "")
    ts, end = intervals(gpu)
    dur = gpu[T.GPU_DUR].to_numpy(dtype=float)
    kind = gpu[T.GPU_KIND].to_numpy(dtype=object)
    stream = gpu[T.GPU_STREAM].to_numpy()
    queue = np.where(linked, np.maximum(ts - rt_end, 0.0), np.nan)
    # idle gaps per stream, HTA style
    order = np.lexsort((ts, stream))
    prev_end = np.full(n, np.nan)
    if n:
        s_sorted = stream[order]
        same = np.zeros(n, dtype=bool)
        same[1:] = s_sorted[1:] == s_sorted[:-1]
        pe = np.full(n, np.nan)
        pe[1:] = end[order][:-1]
        prev_end[order] = np.where(same, pe, np.nan)
    gap = np.maximum(ts - prev_end, 0.0)
    has_gap = ~np.isnan(prev_end)
    host = has_gap & linked & (rt_ts > prev_end)
    kwait = has_gap & ~host & (ts - prev_end < kernel_wait_us)
    category = np.where(~has_gap, NO_GAP, np.where(host, HOST_WAIT,
                                                   np.where(kwait, KERNEL_WAIT, OTHER_WAIT)))
    is_kernel = kind == T.KIND_KERNEL
    short = is_kernel & linked & (rt_kind == "kernel") & (dur < rt_dur)
    return pd.DataFrame({
        A_STEP: gpu[T.GPU_STEP].to_numpy(), A_STREAM: stream, A_KIND: kind, A_DUR: dur,
        A_LAUNCH_US: np.where(linked, rt_dur, np.nan), A_QUEUE_US: queue, A_GAP_US: gap,
        A_IDLE: category, A_SHORT: short,
    })


def _streams(act: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for stream, g in act.groupby(A_STREAM, sort=True):
        gaps = g[A_GAP_US].fillna(0.0)
        by = gaps.groupby(g[A_IDLE]).sum()
        rows.append({
            S_STREAM: int(stream), S_ACTIVITIES: len(g), S_BUSY_US: float(g[A_DUR].sum()),
            S_IDLE_US: float(gaps.sum()), S_HOST_WAIT_US: float(by.get(HOST_WAIT, 0.0)),
            S_KERNEL_WAIT_US: float(by.get(KERNEL_WAIT, 0.0)), S_OTHER_US: float(by.get(OTHER_WAIT, 0.0)),
        })
    cols = [S_STREAM, S_ACTIVITIES, S_BUSY_US, S_IDLE_US, S_HOST_WAIT_US, S_KERNEL_WAIT_US, S_OTHER_US]
    return pd.DataFrame(rows, columns=cols)


def launch_overhead(rank, *, kernel_wait_us: float = KERNEL_WAIT_US) -> LaunchOverhead:
    """Launch overhead vs GPU time of one RankTrace, per step.

    Definitions (all times in µs):

    - Step window: the CPU-side ``ProfilerStep#N`` range; the last step's window is stretched to the end
      of the GPU work it launched. A trace without steps is one pseudo-step (number -1) spanning all its
      events (``trace.summary.span_us``, as ``tracekit info`` shows). ``span_us`` is the window's length.
    - Kernels, launches and CPU launch time count by step of the launch call (``gpu.step``,
      ``runtime.step``). Launches are every runtime/driver call the loader links to GPU work
      (``tables.LAUNCH_APIS``: cudaLaunchKernel(ExC), cuLaunchKernel(Ex), cudaMemcpyAsync,
      cudaMemsetAsync, cudaGraphLaunch, hip*...).
    - ``gpu_busy_us``: length of the union of all GPU activity intervals (kernels, memcpy, memset, any
      stream) inside the window; ``gpu_idle_us = span_us - gpu_busy_us``.
    - Queue delay of a GPU activity: its start minus the end of its launch call, clipped at 0.
    - Short kernels: kernels (launched by a kernel-launch call) whose duration is below that call's.
    - Idle breakdown (HTA ``get_idle_time_breakdown``): on each stream, the gap before each activity
      (start minus the previous activity's end on that stream) is ``host_wait`` when the activity's
      launch call started after the previous activity ended, else ``kernel_wait`` when the gap is below
      ``kernel_wait_us`` (HTA's ``consecutive_kernel_delay``, 30 in the trace's µs), else ``other``.
      It is summed over streams, so it is not the same quantity as ``gpu_idle_us``.

    Verdict (thresholds: the module constants): ``cpu-only`` without GPU activity; ``gpu-bound`` when the GPU is busy
    at least GPU_BOUND_UTIL of the span; ``launch-bound`` when it is busy less than LAUNCH_BOUND_UTIL
    and either CPU launch time is at least LAUNCH_BOUND_CPU_RATIO of GPU busy time or at least
    LAUNCH_BOUND_SHORT_SHARE of the kernels are shorter than their own launch call; ``mixed`` otherwise.
    """
    windows, scope = _windows(rank)
    act = _activities(rank, kernel_wait_us)
    gpu, rt = rank.gpu, rank.runtime
    starts, ends = merge_intervals(*intervals(gpu))
    w0, w1 = windows["ts"].to_numpy(dtype=float), windows["end"].to_numpy(dtype=float)
    busy = busy_in_windows(starts, ends, w0, w1)
    n = len(windows)
    # the step each row counts in (position in `windows`, -1 for none): its launch's step, or
    # every row when the trace has no steps
    numbers = pd.Index(windows["step"].to_numpy())
    a_pos = numbers.get_indexer(act[A_STEP].to_numpy()) if scope == "steps" else np.zeros(len(act), int)
    r_pos = numbers.get_indexer(rt[T.RT_STEP].to_numpy()) if scope == "steps" else np.zeros(len(rt), int)
    rt_kind = rt[T.RT_KIND].to_numpy(dtype=object) if len(rt) else np.empty(0, dtype=object)
    rt_dur = rt[T.RT_DUR].to_numpy(dtype=float) if len(rt) else np.empty(0)
    is_launch = np.isin(rt_kind, T.LAUNCH_KINDS)
    is_sync = rt_kind == "sync"
    gaps = act[A_GAP_US].fillna(0.0).to_numpy()
    cat = act[A_IDLE].to_numpy(dtype=object)

    def per_step(pos: np.ndarray, mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        keep = mask & (pos >= 0)
        w = None if weights is None else weights[keep]
        return np.bincount(pos[keep], weights=w, minlength=n)

    every = np.ones(len(act), dtype=bool)
    columns = {
        "kernels": per_step(a_pos, act[A_KIND].to_numpy(dtype=object) == T.KIND_KERNEL),
        "gpu_ops": per_step(a_pos, every),
        "launches": per_step(r_pos, is_launch), "cpu_launch_us": per_step(r_pos, is_launch, rt_dur),
        "syncs": per_step(r_pos, is_sync), "sync_us": per_step(r_pos, is_sync, rt_dur),
        "span_us": w1 - w0, "gpu_busy_us": busy,
        "host_wait_us": per_step(a_pos, cat == HOST_WAIT, gaps),
        "kernel_wait_us": per_step(a_pos, cat == KERNEL_WAIT, gaps),
        "other_idle_us": per_step(a_pos, cat == OTHER_WAIT, gaps),
        "short_kernels": per_step(a_pos, act[A_SHORT].to_numpy(dtype=bool)),
    }
    kinds = {f.name: int if f.type in (int, "int") else float for f in fields(LaunchTotals)}
    step_totals = tuple(LaunchTotals(steps=1, **{k: kinds[k](v[i]) for k, v in columns.items()})
                        for i in range(n))
    queue = act[A_QUEUE_US].to_numpy()
    queues = _queue_by_step(a_pos, queue, n)
    steps = pd.DataFrame({"step": windows["step"].to_numpy(), "ts": w0, "end": w1})
    for name in columns:
        steps[name] = [getattr(t, name) for t in step_totals]
    steps["verdict"] = [t.verdict for t in step_totals]
    for key, values in queues.items():
        steps[key] = values
    return LaunchOverhead(
        rank=int(rank.rank), scope=scope, steps=steps, streams=_streams(act), activities=act,
        apis=_apis(rt, (r_pos >= 0) & (is_launch | is_sync)), totals=sum(step_totals, LaunchTotals()),
        queue=QueueStats.of(queue[a_pos >= 0]), step_totals=step_totals,
    )


def _queue_by_step(pos: np.ndarray, queue: np.ndarray, n: int) -> dict[str, list]:
    """p50 / p90 / max queue delay per step position (None where a step has no linked activity)."""
    out: dict[str, list] = {"queue_p50_us": [None] * n, "queue_p90_us": [None] * n,
                            "queue_max_us": [None] * n}
    keep = (pos >= 0) & ~np.isnan(queue)
    if not keep.any():
        return out
    frame = pd.DataFrame({"pos": pos[keep], "q": queue[keep]})
    grouped = frame.groupby("pos")["q"]
    for key, series in (("queue_p50_us", grouped.quantile(0.5)), ("queue_p90_us", grouped.quantile(0.9)),
                        ("queue_max_us", grouped.max())):
        for p, v in series.items():
            out[key][int(p)] = float(v)
    return out


def _apis(rt: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    cols = [API_NAME, API_KIND, API_COUNT, API_TIME_US]
    if not mask.any():
        return pd.DataFrame(columns=cols)
    sel = rt[mask]
    out = sel.groupby([T.RT_NAME, T.RT_KIND], sort=False)[T.RT_DUR].agg(["count", "sum"]).reset_index()
    out.columns = cols
    return out.sort_values([API_TIME_US, API_NAME], ascending=[False, True]).reset_index(drop=True)
