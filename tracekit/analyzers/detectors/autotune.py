"""Triton's autotuner benchmarking inside the steps: `@triton.autotune` re-tunes whenever its key changes, and a key on a size that changes every step (a packed batch's token count) re-runs the benchmark of every configuration every step.

Triton's `do_bench` clears the L2 before each timed run by filling a large buffer (`cache.zero_()`:
an `aten::zero_` / `aten::fill_` over ≥ FLUSH_MIN_ELEMENTS elements, 256 MB on Hopper), then launches
the kernel under test, records CUDA events and synchronises. In a trace: launch calls of such fills,
each followed by a launch of a user Triton kernel (tracekit's Triton metadata), MIN_FLUSHES or more in
a step on one thread, with device or event synchronisations after them (held-out triton_autotune_key,
H100: 255 fills and ~300 add + RMSNorm launches a step for 8 real calls, 42.8 ms a step unprofiled;
keyed on the row width only, tuned once, 2.9 ms). The tuning window on that thread runs from the
first fill's launch to the end of the last synchronisation after the last benchmark launch (or that
launch's end); every runtime call in it is the tuner's (its warm-up runs, timed runs, fills, event
records and syncs): the real call of the tuned kernel comes after it.

One row per step × thread with a tuning window; per rank.runtime row, whether it is in one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

FLUSH_OPS = frozenset({"aten::fill_", "aten::zero_"})
FLUSH_MIN_ELEMENTS = 16 * 1024 * 1024  # the L2 flush buffer: 64 MB of int32 and more (Triton's is 256 MB)
MIN_FLUSHES = 8  # fills followed by a Triton launch in one step on one thread: fewer is no benchmark

# --- columns of Patterns.autotune (one row per step × thread with a tuning window) ------------------
AT_STEP = "step"
AT_THREAD = "thread"
AT_KERNEL = "kernel"  # the Triton kernel benchmarked most often
AT_FLUSHES = "flushes"  # L2-flush fills in the window
AT_LAUNCHES = "launches"  # launch calls of that kernel in the window
AT_SYNCS = "syncs"  # synchronisation calls in the window
AT_WINDOW_US = "window_us"  # the window's wall time on its thread
AT_GPU_US = "gpu_us"  # GPU time of what the window's calls launched
AUTOTUNE_COLUMNS = (AT_STEP, AT_THREAD, AT_KERNEL, AT_FLUSHES, AT_LAUNCHES, AT_SYNCS, AT_WINDOW_US, AT_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(AUTOTUNE_COLUMNS))


@dataclass(frozen=True)
class Autotune:
    """The table; per rank.runtime row a call of a tuning window (what the rule's what-if removes)."""

    table: pd.DataFrame
    calls: np.ndarray


def _flush_ops(rank: RankTrace) -> np.ndarray:
    """Per op row: a fill / zero_ over at least FLUSH_MIN_ELEMENTS elements (its first input's dims)."""
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    flush = np.isin(names, list(FLUSH_OPS))
    for i in np.flatnonzero(flush).tolist():
        dims = rank.op_inputs(i).get(tables.OP_INPUT_DIMS) or []
        first = dims[0] if dims and isinstance(dims[0], list) else []
        n = 1
        for d in first:
            n = n * d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else 0
        flush[i] = bool(first) and n >= FLUSH_MIN_ELEMENTS
    return flush


def find_autotune(rank: RankTrace, steps: StepsOf, triton_rows: np.ndarray) -> Autotune:
    """AUTOTUNE_COLUMNS per step × thread whose calls benchmark a user Triton kernel (`triton_rows`: per
    rank.gpu row its launch configuration, -1 not a user Triton kernel: Patterns.triton_rows)."""
    rt, gpu = rank.runtime, rank.gpu
    calls = np.zeros(len(rt), dtype=bool)
    none = Autotune(empty(), calls)
    if not len(rt) or not len(gpu) or len(triton_rows) != len(gpu) or not (triton_rows >= 0).any():
        return none
    flush_op = _flush_ops(rank)
    if not flush_op.any():
        return none
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    launch = np.isin(kind, tables.LAUNCH_KINDS)
    is_flush = launch & (rt_op >= 0) & flush_op[np.maximum(rt_op, 0)]
    if int(is_flush.sum()) < MIN_FLUSHES:
        return none
    # per runtime row: the user Triton kernel it launched (its gpu row), -1 none
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    triton_call = np.full(len(rt), -1, dtype=np.int64)
    user = (triton_rows >= 0) & (gpu_launch >= 0)
    triton_call[gpu_launch[user]] = np.flatnonzero(user)
    tid = rt[tables.RT_TID].to_numpy()
    ts, end = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_END].to_numpy(dtype=float)
    is_sync = np.isin(kind, tables.SYNC_KINDS)
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    step_of = steps.runtime
    out = []
    for (s, thread) in sorted({(int(a), b) for a, b in zip(step_of[is_flush], tid[is_flush], strict=True)}):
        mine = np.flatnonzero((step_of == s) & (tid == thread))  # in time order
        flushes = mine[is_flush[mine]]
        nxt = np.searchsorted(mine, flushes) + 1
        ok = nxt < len(mine)
        benched = [int(mine[j]) for j in nxt[ok] if triton_call[mine[j]] >= 0]
        if len(benched) < MIN_FLUSHES:
            continue
        last = benched[-1]
        later = mine[mine > last]
        sync_at = np.flatnonzero(is_sync[later])
        launch_at = np.flatnonzero(triton_call[later] >= 0)
        # the benchmark's own sync after its last run (before the tuned kernel's real call), else that run
        stop = end[later[sync_at[0]]] if len(sync_at) and (not len(launch_at) or sync_at[0] < launch_at[0]) else end[last]
        window = mine[(ts[mine] >= ts[flushes[0]]) & (end[mine] <= stop)]
        calls[window] = True
        launched = np.isin(gpu_launch, window) & (gpu_launch >= 0)
        kernel_rows = [triton_call[c] for c in window if triton_call[c] >= 0]
        top = pd.Series(names[kernel_rows]).value_counts() if kernel_rows else pd.Series(dtype=object)
        out.append({AT_STEP: s, AT_THREAD: int(thread), AT_KERNEL: str(top.index[0]) if len(top) else "",
                    AT_FLUSHES: int(is_flush[window].sum()), AT_LAUNCHES: len(kernel_rows),
                    AT_SYNCS: int(is_sync[window].sum()), AT_WINDOW_US: float(stop - ts[flushes[0]]),
                    AT_GPU_US: float(dur[launched].sum())})
    if not out:
        return none
    return Autotune(pd.DataFrame(out, columns=list(AUTOTUNE_COLUMNS)), calls)
