"""Synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1 and the like): every launch call returns only after its kernel ends.

A kernel launch call (cudaLaunchKernel, cuLaunchKernel(Ex)...) normally returns once the kernel is
queued: a few µs, whatever the kernel's length, and the kernel ends after the call for any kernel
longer than that. With `CUDA_LAUNCH_BLOCKING=1` (or any setting that makes launches synchronous) the
call returns after its kernel (linked by `correlation`) has finished, so the host and the GPU take
turns: the GPU idles while the host works between launches, the host idles inside every launch. The
trace shows it in the launches whose kernel is long enough to tell: longer than KERNEL_MIN_US and
than a launch call takes when its kernel is tiny (the profiler's own cost per call, which can make a
5-20 µs launch outlast a 2 µs kernel without any blocking). On the 41 H200 recordings of
sample_traces/bare and the held-out sets, at most 1.6 % of those end after their kernel; with
blocking launches nearly all do (BLOCKED_SHARE), and a launch lasts longer the longer its kernel
(TRACK_SHARE), which a launch slowed by the profiler does not. Graph launches, copies and memsets are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.anomaly import debug_settings
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

KERNEL_MIN_US = 5.0  # a kernel shorter than this cannot tell a blocking launch from a slow one
TINY_PERCENTILE = 90.0  # ... nor one shorter than this percentile of the launch calls of kernels under KERNEL_MIN_US
TINY_MIN = 10  # tiny-kernel launches needed before that percentile is read
END_SLACK_US = 1.0  # a call "ends after its kernel" when it ends at most this much before the kernel's end
BLOCKED_SHARE = 0.9  # share of the telling launches that must end after their kernel
MIN_TELLING = 10  # telling launches needed on the rank
# A blocking launch lasts as long as its kernel: the telling launches of the longer half of kernels
# must take at least TRACK_SHARE of the kernels' extra time longer than those of the shorter half (a
# launch slowed by the profiler lasts the same whatever its kernel). When the two halves' kernels
# differ by less than TRACK_MIN_US this cannot be read: the setting tracekit profile recorded decides.
TRACK_SHARE = 0.5
TRACK_MIN_US = 5.0
# The profiled kernel launch call of an H200 recording without blocking, when the rank has no launch
# of its own that returned before its kernel ended: the median over the 41 recordings of
# sample_traces/bare of each one's median cudaLaunchKernel duration (8.4 µs; their 10th percentiles'
# median: 6.3 µs).
DEFAULT_LAUNCH_US = 8.4
DEFAULT_FAST_LAUNCH_US = 6.3

# --- columns of Patterns.launch_blocking (one row per step with blocking launches) ---------------
LB_STEP = "step"
LB_LAUNCHES = "launches"  # kernel launch calls linked to a kernel
LB_TELLING = "telling"  # ... whose kernel is long enough to tell
LB_BLOCKED = "blocked"  # telling launches that ended after their kernel
LB_WAIT_US = "wait_us"  # Σ over the step's blocking launches of their duration − the normal launch cost
LB_KERNEL_US = "kernel_us"  # Σ duration of the kernels of those launches
LB_LAUNCH_US = "launch_us"  # the normal (non-blocking) launch call the rank's what-if uses
LB_COLUMNS = (LB_STEP, LB_LAUNCHES, LB_TELLING, LB_BLOCKED, LB_WAIT_US, LB_KERNEL_US, LB_LAUNCH_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(LB_COLUMNS))


def _launches(rank: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(runtime row, call end, kernel end, kernel duration) of every kernel launch call linked to an
    eager kernel (its first kernel when it launched several)."""
    rt, gpu = rank.runtime, rank.gpu
    none = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0)
    if not len(rt) or not len(gpu):
        return none
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    eager = (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL) & (launch >= 0)
    if tables.GPU_GRAPH in gpu:
        eager &= gpu[tables.GPU_GRAPH].to_numpy(dtype=np.int64) < 0
    rows = np.flatnonzero(eager)
    if not len(rows):
        return none
    calls, first = np.unique(launch[rows], return_index=True)
    rows = rows[first]
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)[calls]
    keep = kind == tables.KIND_KERNEL
    calls, rows = calls[keep], rows[keep]
    call_end = rt[tables.RT_END].to_numpy(dtype=float)[calls]
    k_end = gpu[tables.GPU_END].to_numpy(dtype=float)[rows]
    k_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)[rows]
    return calls, call_end, k_end, k_dur


def telling_min_us(call_dur: np.ndarray, k_dur: np.ndarray) -> float:
    """The kernel length from which a launch tells: KERNEL_MIN_US, or the TINY_PERCENTILE of the
    launch calls of kernels shorter than it (the call's own cost, profiler included) when longer."""
    tiny = call_dur[k_dur < KERNEL_MIN_US]
    if len(tiny) < TINY_MIN:
        return KERNEL_MIN_US
    return max(KERNEL_MIN_US, float(np.percentile(tiny, TINY_PERCENTILE)))


def blocking_calls(rank: RankTrace) -> np.ndarray:
    """Per rank.runtime row: a kernel launch call that returned after its kernel ended, on a rank
    whose launches block (BLOCKED_SHARE of at least MIN_TELLING telling launches); all False else."""
    out = np.zeros(len(rank.runtime), dtype=bool)
    calls, call_end, k_end, k_dur = _launches(rank)
    if len(calls) < MIN_TELLING:
        return out
    call_dur = rank.runtime[tables.RT_DUR].to_numpy(dtype=float)[calls]
    after = call_end >= k_end - END_SLACK_US
    telling = k_dur >= telling_min_us(call_dur, k_dur)
    if int(telling.sum()) < MIN_TELLING or float(after[telling].mean()) < BLOCKED_SHARE:
        return out
    if not _tracks(call_dur[telling], k_dur[telling]) and not dict(debug_settings(rank)).get("cuda_launch_blocking", False):
        return out
    out[calls[after]] = True
    return out


def _tracks(call_dur: np.ndarray, k_dur: np.ndarray) -> bool:
    """The launch calls grow with their kernels (TRACK_SHARE); False when it cannot be read (TRACK_MIN_US)."""
    cut = float(np.median(k_dur))
    low, high = k_dur <= cut, k_dur > cut
    if not low.any() or not high.any():
        return False
    dk = float(np.median(k_dur[high]) - np.median(k_dur[low]))
    dc = float(np.median(call_dur[high]) - np.median(call_dur[low]))
    return dk >= TRACK_MIN_US and dc >= TRACK_SHARE * dk


def normal_launch_us(rank: RankTrace, blocking: np.ndarray) -> float:
    """The rank's kernel launch call when it does not block: the median of its kernel launch calls
    that returned before their kernel ended (MIN_TELLING of them at least), else DEFAULT_LAUNCH_US."""
    rt = rank.runtime
    if not len(rt):
        return DEFAULT_LAUNCH_US
    calls, call_end, k_end, _ = _launches(rank)
    free = calls[(call_end < k_end - END_SLACK_US) & ~blocking[calls]]
    if len(free) < MIN_TELLING:
        return DEFAULT_LAUNCH_US
    return float(np.median(rt[tables.RT_DUR].to_numpy(dtype=float)[free]))


def find_launch_blocking(rank: RankTrace, steps: StepsOf, blocking: np.ndarray) -> pd.DataFrame:
    """Per step with blocking launches (`blocking`: blocking_calls(rank)), LB_COLUMNS; empty when none."""
    if not blocking.any():
        return empty()
    calls, call_end, k_end, k_dur = _launches(rank)
    call_dur = rank.runtime[tables.RT_DUR].to_numpy(dtype=float)[calls]
    telling = k_dur >= telling_min_us(call_dur, k_dur)
    after = call_end >= k_end - END_SLACK_US
    normal = normal_launch_us(rank, blocking)
    step = np.asarray(steps.runtime)[calls]
    frame = pd.DataFrame({"step": step, "telling": telling, "blocked": telling & after, "is_blocking": blocking[calls],
                          "wait": np.where(blocking[calls], np.clip(call_dur - normal, 0.0, None), 0.0),
                          "kernel": np.where(blocking[calls], k_dur, 0.0)})
    rows = []
    for number, g in frame.groupby("step", sort=True):
        if not g["is_blocking"].any():
            continue
        rows.append({LB_STEP: int(number), LB_LAUNCHES: len(g), LB_TELLING: int(g["telling"].sum()),
                     LB_BLOCKED: int(g["blocked"].sum()), LB_WAIT_US: float(g["wait"].sum()),
                     LB_KERNEL_US: float(g["kernel"].sum()), LB_LAUNCH_US: normal})
    return pd.DataFrame(rows, columns=list(LB_COLUMNS)) if rows else empty()
