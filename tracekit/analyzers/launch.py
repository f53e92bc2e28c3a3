"""Launch overhead vs GPU time per step: launches, CPU launch time, GPU busy/idle, queue delay, verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers import idle
from tracekit.analyzers.steady import StepPhase
from tracekit.analyzers.step_plan import StepPlan, per_step, plan_steps
from tracekit.analyzers.totals import (  # noqa: F401  (re-exported: the verdict names live with the totals)
    CPU_ONLY,
    GPU_BOUND,
    HOST_BOUND,
    LAUNCH_BOUND,
    MIXED,
    VERDICTS,
    LaunchTotals,
    bottleneck,
)
from tracekit.analyzers.windows import StepWindows
from tracekit.jsonsafe import plain, records
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, intervals, merge_intervals
from tracekit.trace.model import RankTrace

KERNEL_WAIT_US = 30.0  # idle gaps below this between already-launched kernels are "kernel wait" (HTA)

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
A_POS = "step_pos"  # position of the activity's step in LaunchOverhead.steps (-1: in none)

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


@dataclass(frozen=True)
class LaunchOverhead:
    """Launch overhead of one rank: per-step table, per-stream idle table, per-activity detail.

    `totals` sums the steps `plan` selects (the steady ones by default: see tracekit.analyzers.steady),
    `all_totals` every step; `step_totals` and `phases` are per step, aligned with `steps` rows.
    """

    rank: int
    scope: str  # 'steps' (ProfilerStep), 'inferred' (repeats of the op sequence) or 'trace' (step -1)
    steps: pd.DataFrame  # one row per step: "step", "ts", "end", the LaunchTotals fields, queue, phase
    streams: pd.DataFrame  # S_* columns, one row per stream
    activities: pd.DataFrame  # A_* columns, aligned with rank.gpu positions
    apis: pd.DataFrame  # API_* columns: launch and sync calls inside the selected steps, by name
    totals: LaunchTotals  # the selected (steady) steps
    queue: QueueStats  # the selected steps' GPU activities
    step_totals: tuple[LaunchTotals, ...]
    all_totals: LaunchTotals
    plan: StepPlan = field(repr=False, compare=False)  # the steps, their phases and the selected ones

    @property
    def verdict(self) -> str:
        return self.totals.verdict

    @property
    def phases(self) -> tuple[StepPhase, ...]:
        return self.plan.phases

    @property
    def selected(self) -> tuple[bool, ...]:
        """Per step: counted in `totals`."""
        return tuple(bool(keep) for keep in self.plan.selected)

    @property
    def steps_mode(self) -> str:
        """The selection's text (JSON `steps_mode`): steady, all or N-M."""
        return self.plan.selection.mode

    @property
    def windows(self) -> StepWindows:
        return self.plan.windows

    @property
    def steady_steps(self) -> tuple[int, ...]:
        """Numbers of the steps the headline numbers cover."""
        return tuple(int(s) for s, keep in zip(self.steps["step"].tolist(), self.selected, strict=True) if keep)

    @property
    def excluded(self) -> tuple[StepPhase, ...]:
        """The steps left out of the headline, with their phase and reason."""
        return tuple(p for p, keep in zip(self.phases, self.selected, strict=True) if not keep)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "scope": self.scope,
            "summary": {**self.totals.to_dict(), **_queue_fields(self.queue)},
            "steps": step_records(self),
            "streams": records(self.streams),
            "apis": records(self.apis),
        }


def steady_mask(lo: LaunchOverhead) -> np.ndarray:
    """GPU activities (rows of `lo.activities`, i.e. of rank.gpu) that count in the headline: those
    launched in a selected step (every activity when the trace is one pseudo-step)."""
    return lo.plan.gpu_rows


def step_numbers(lo: LaunchOverhead) -> np.ndarray:
    """The step number of each activity (rows of `lo.activities`), -1 outside every step."""
    pos = lo.activities[A_POS].to_numpy()
    numbers = lo.steps["step"].to_numpy()
    if not len(numbers):
        return np.full(len(pos), -1)
    return np.where(pos >= 0, numbers[np.maximum(pos, 0)], -1)


def step_records(lo: LaunchOverhead) -> list[dict[str, Any]]:
    """Per-step rows as JSON-ready dicts (numbers, verdict, cause, queue delay, phase)."""
    out = []
    for row, totals, phase in zip(lo.steps.to_dict("records"), lo.step_totals, lo.phases, strict=True):
        rec = {"rank": lo.rank, "step": int(row["step"]), **totals.to_dict()}
        rec.update({k: plain(row[k]) for k in ("queue_p50_us", "queue_p90_us", "queue_max_us")})
        rec["phase"] = phase.phase
        rec["phase_reason"] = phase.reason
        rec.pop("steps", None)
        out.append(rec)
    return out


def _queue_fields(q: QueueStats) -> dict[str, Any]:
    return {"queue_p50_us": q.p50_us, "queue_p90_us": q.p90_us, "queue_max_us": q.max_us}


def _activities(rank: RankTrace, kernel_wait_us: float) -> pd.DataFrame:
    gpu, rt = rank.gpu, rank.runtime
    n = len(gpu)
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    linked = launch >= 0
    safe = np.maximum(launch, 0)
    has_rt = len(rt) > 0
    rt_start, rt_stop = intervals(rt)
    rt_ts = rt_start[safe] if has_rt else np.zeros(n)
    rt_end = rt_stop[safe] if has_rt else np.zeros(n)
    rt_dur = rt[tables.RT_DUR].to_numpy(dtype=float)[safe] if has_rt else np.zeros(n)
    rt_kind = rt[tables.RT_KIND].to_numpy(dtype=object)[safe] if has_rt else np.full(n, "")
    ts, end = intervals(gpu)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    kind = gpu[tables.GPU_KIND].to_numpy(dtype=object)
    stream = gpu[tables.GPU_STREAM].to_numpy()
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
    is_kernel = kind == tables.KIND_KERNEL
    short = is_kernel & linked & (rt_kind == "kernel") & (dur < rt_dur)
    return pd.DataFrame({
        A_STEP: gpu[tables.GPU_STEP].to_numpy(), A_STREAM: stream, A_KIND: kind, A_DUR: dur,
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


def launch_overhead(rank: RankTrace, plan: StepPlan | None = None, *, kernel_wait_us: float = KERNEL_WAIT_US,
                    classes: np.ndarray | None = None) -> LaunchOverhead:
    """Launch overhead vs GPU time of one RankTrace, per step.

    Definitions (all times in µs):

    - Steps (tracekit.analyzers.windows): ProfilerStep ranges (the last one stretched to the end of
      the GPU work it launched); without them, repeats of the top-level op sequence (scope
      "inferred", GPU-side windows); else one pseudo-step -1 from the first GPU launch to the end of
      the last GPU activity (the CPU prologue and tail are not GPU idle time). ``span_us`` is the
      window's length.
    - Kernels, launches and CPU launch time count by step of the launch call. Launches are the
      runtime/driver calls that put work on the GPU (``tables.LAUNCH_APIS``). Syncs are the calls
      that block the host on the GPU, synchronous copies included (``tables.SYNC_KINDS``).
    - ``gpu_busy_us``: length of the union of all GPU activity intervals inside the window.
    - Queue delay: GPU start minus the end of its launch call, clipped at 0.
    - Short kernels: kernels whose duration is below their own launch call's.
    - Idle breakdown (HTA ``get_idle_time_breakdown``): per stream, the gap before each activity is
      ``host_wait`` when its launch started after the previous activity ended, else ``kernel_wait``
      under ``kernel_wait_us``, else ``other``; summed over streams.
    - Idle causes (tracekit.analyzers.idle): every GPU-idle interval split by what held the GPU.
    - Phases and the selected steps come from `plan` (tracekit.analyzers.step_plan; default: the
      steady steps): set-up, warm-up, partial and outlier steps are left out of ``totals`` unless
      the plan's selection keeps them. The verdict and cause come from ``totals``
      (tracekit.analyzers.totals.bottleneck).
    """
    plan = plan if plan is not None else plan_steps(rank)
    act = _activities(rank, kernel_wait_us)
    act[A_POS] = plan.windows.gpu_pos
    step_totals = _step_totals(step_columns(rank, plan, act, classes))
    queue = act[A_QUEUE_US].to_numpy()
    return LaunchOverhead(
        rank=int(rank.rank), scope=plan.scope, steps=step_table(plan, step_totals, act), streams=_streams(act),
        activities=act, apis=_apis(rank.runtime, plan.runtime_rows & _launch_or_sync(rank.runtime)),
        totals=sum((t for t, keep in zip(step_totals, plan.selected, strict=True) if keep), LaunchTotals()),
        queue=QueueStats.of(queue[plan.gpu_rows]), step_totals=step_totals,
        all_totals=sum(step_totals, LaunchTotals()), plan=plan,
    )


def _runtime_columns(runtime: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(kind, duration) of each runtime call (empty arrays without runtime calls)."""
    if not len(runtime):
        return np.empty(0, dtype=object), np.empty(0)
    return runtime[tables.RT_KIND].to_numpy(dtype=object), runtime[tables.RT_DUR].to_numpy(dtype=float)


def _launch_or_sync(runtime: pd.DataFrame) -> np.ndarray:
    """Runtime calls that launch GPU work or wait for it (bool per row)."""
    kind, _ = _runtime_columns(runtime)
    return np.isin(kind, tables.LAUNCH_KINDS) | np.isin(kind, tables.SYNC_KINDS)


def step_columns(rank: RankTrace, plan: StepPlan, act: pd.DataFrame,
                 classes: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per step (position in the plan): every LaunchTotals field but `steps` (see launch_overhead)."""
    steps, gpu_pos, rt_pos = len(plan), plan.windows.gpu_pos, plan.windows.rt_pos
    rt_kind, rt_dur = _runtime_columns(rank.runtime)
    is_launch = np.isin(rt_kind, tables.LAUNCH_KINDS)
    is_sync = np.isin(rt_kind, tables.SYNC_KINDS)
    gaps = act[A_GAP_US].fillna(0.0).to_numpy()
    wait = act[A_IDLE].to_numpy(dtype=object)
    starts, ends = merge_intervals(*intervals(rank.gpu))
    return {
        "kernels": per_step(gpu_pos, act[A_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL, steps),
        "gpu_ops": per_step(gpu_pos, np.ones(len(act), dtype=bool), steps),
        "launches": per_step(rt_pos, is_launch, steps),
        "cpu_launch_us": per_step(rt_pos, is_launch, steps, rt_dur),
        "syncs": per_step(rt_pos, is_sync, steps), "sync_us": per_step(rt_pos, is_sync, steps, rt_dur),
        "span_us": plan.span_us, "gpu_busy_us": busy_in_windows(starts, ends, plan.windows.ts, plan.windows.end),
        "host_wait_us": per_step(gpu_pos, wait == HOST_WAIT, steps, gaps),
        "kernel_wait_us": per_step(gpu_pos, wait == KERNEL_WAIT, steps, gaps),
        "other_idle_us": per_step(gpu_pos, wait == OTHER_WAIT, steps, gaps),
        "short_kernels": per_step(gpu_pos, act[A_SHORT].to_numpy(dtype=bool), steps),
        **idle.idle_components(rank, plan.windows, classes),
    }


_FIELD_TYPES: dict[str, type[int] | type[float]] = {
    f.name: int if f.type in (int, "int") else float for f in fields(LaunchTotals)}


def _step_totals(columns: dict[str, np.ndarray]) -> tuple[LaunchTotals, ...]:
    """One LaunchTotals per step from the per-step columns."""
    out = []
    for i in range(len(columns["span_us"])):
        values: dict[str, Any] = {k: _FIELD_TYPES[k](v[i]) for k, v in columns.items()}  # int or float by field
        out.append(LaunchTotals(steps=1, **values))
    return tuple(out)


def step_table(plan: StepPlan, step_totals: tuple[LaunchTotals, ...], act: pd.DataFrame) -> pd.DataFrame:
    """LaunchOverhead.steps: step, window, the LaunchTotals fields, verdict, cause, phase, queue delay."""
    table = pd.DataFrame({"step": plan.windows.numbers, "ts": plan.windows.ts, "end": plan.windows.end})
    names = [f.name for f in fields(LaunchTotals) if f.name != "steps"]
    for name in names:
        table[name] = [getattr(t, name) for t in step_totals]
    table["verdict"] = [t.verdict for t in step_totals]
    table["cause"] = [t.cause for t in step_totals]
    table["phase"] = [p.phase for p in plan.phases]
    for key, values in _queue_by_step(plan.windows.gpu_pos, act[A_QUEUE_US].to_numpy(), len(plan)).items():
        table[key] = values
    return table


def _queue_by_step(pos: np.ndarray, queue: np.ndarray, n: int) -> dict[str, list[float | None]]:
    """p50 / p90 / max queue delay per step position (None where a step has no linked activity)."""
    out: dict[str, list[float | None]] = {"queue_p50_us": [None] * n, "queue_p90_us": [None] * n,
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
    out = sel.groupby([tables.RT_NAME, tables.RT_KIND], sort=False)[tables.RT_DUR].agg(["count", "sum"]).reset_index()
    out.columns = cols
    return out.sort_values([API_TIME_US, API_NAME], ascending=[False, True]).reset_index(drop=True)
