"""Multi-process DataLoader iterators created per step: worker start-up, the first batch's wait and the shutdown."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace

# A multi-process iterator's __next__: `enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`
# (a CPU annotation in current PyTorch, a top-level op in older ones)
MULTI_NEXT = re.compile(r"^enumerate\(DataLoader\)#_MultiProcessingDataLoaderIter\.__next__")
# A new iterator draws its base seed first (torch/utils/data/dataloader.py _BaseDataLoaderIter.__init__:
# `torch.empty((), dtype=torch.int64).random_(generator=...).item()`), a top-level aten::random_ on the
# training thread; _MultiProcessingDataLoaderIter.__init__ then forks its workers, with nothing recorded.
SEED_OP = re.compile(r"^aten::random_$")

# --- columns of Patterns.loader_respawn (one row per step whose multi-process iterator is new) ----
LR_STEP = "step"  # the step of the iterator's first __next__
LR_CALLS = "calls"  # __next__ calls of that iterator in the step
LR_STARTUP_US = "startup_us"  # unrecorded time from its seed op to its first __next__ (workers forked)
LR_WAIT_US = "wait_us"  # time in its __next__ calls
LR_SHUTDOWN_US = "shutdown_us"  # unrecorded time after its last __next__ (workers joined)
LR_GPU_IDLE_US = "gpu_idle_us"  # GPU idle inside start-up, wait and shutdown
LR_COLUMNS = (LR_STEP, LR_CALLS, LR_STARTUP_US, LR_WAIT_US, LR_SHUTDOWN_US, LR_GPU_IDLE_US)


def empty() -> pd.DataFrame:
    """A loader_respawn table with no rows."""
    return pd.DataFrame(columns=list(LR_COLUMNS))


def _next_calls(rank: RankTrace, steps: StepsOf) -> pd.DataFrame:
    """The multi-process __next__ windows on the CPU: tid, ts, end, step."""
    ops, an = rank.ops, rank.annotations
    parts = []
    if len(an):
        sel = ~an[tables.AN_GPU].to_numpy(dtype=bool) & matches(an[tables.AN_NAME], MULTI_NEXT)
        parts.append(pd.DataFrame({"tid": an[tables.AN_TID].to_numpy()[sel], "ts": an[tables.AN_TS].to_numpy(dtype=float)[sel],
                                   "end": an[tables.AN_END].to_numpy(dtype=float)[sel], "step": steps.annotations[sel]}))
    if len(ops):
        sel = (ops[tables.OP_PARENT].to_numpy() < 0) & matches(ops[tables.OP_NAME], MULTI_NEXT)
        parts.append(pd.DataFrame({"tid": ops[tables.OP_TID].to_numpy()[sel], "ts": ops[tables.OP_TS].to_numpy(dtype=float)[sel],
                                   "end": ops[tables.OP_END].to_numpy(dtype=float)[sel], "step": steps.ops[sel]}))
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable") if parts else pd.DataFrame()


def _recorded(rank: RankTrace, tid: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """On thread `tid`: (starts, ends) of its top-level ops and runtime calls merged; the seed ops' ends;
    its runtime calls' ends (sorted)."""
    ops, rt = rank.ops, rank.runtime
    top = (ops[tables.OP_PARENT].to_numpy() < 0) & (ops[tables.OP_TID].to_numpy() == tid) if len(ops) \
        else np.zeros(0, dtype=bool)
    own = rt[tables.RT_TID].to_numpy() == tid if len(rt) else np.zeros(0, dtype=bool)
    o_ts, o_end = ops[tables.OP_TS].to_numpy(dtype=float)[top], ops[tables.OP_END].to_numpy(dtype=float)[top]
    r_ts, r_end = rt[tables.RT_TS].to_numpy(dtype=float)[own], rt[tables.RT_END].to_numpy(dtype=float)[own]
    seeds = np.sort(o_end[matches(ops[tables.OP_NAME][top], SEED_OP)]) if top.any() else np.empty(0)
    s, e = merge_intervals(np.concatenate((o_ts, r_ts)), np.concatenate((o_end, r_end)))
    return s, e, seeds, np.sort(r_end)


def _unrecorded(s: np.ndarray, e: np.ndarray, a: float, b: float) -> float:
    """Time in [a, b) not covered by the merged intervals (s, e)."""
    if b <= a:
        return 0.0
    return (b - a) - float(busy_in_windows(s, e, np.array([a]), np.array([b])).sum())


def find_loader_respawn(rank: RankTrace, steps: StepsOf | None = None) -> pd.DataFrame:
    """Per step, a multi-process DataLoader iterator created in it: a seed op (SEED_OP) on the thread
    after its last runtime call and after the previous __next__, then __next__ calls. Its start-up is
    the unrecorded time from the seed op to the first __next__ (the workers forking), its shutdown the
    unrecorded time from the last __next__ to the thread's next recorded op or runtime call (the
    workers joined as the iterator is dropped)."""
    steps = steps or StepsOf.of(rank)
    calls = _next_calls(rank, steps)
    if not len(calls):
        return empty()
    gpu = rank.gpu
    g0, g1 = merge_intervals(gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float)) \
        if len(gpu) else (np.empty(0), np.empty(0))
    rows = []
    for tid, by_thread in calls.groupby("tid", sort=False):
        s, e, seeds, rt_end = _recorded(rank, tid)
        ts, end, step = (by_thread[c].to_numpy() for c in ("ts", "end", "step"))
        previous = -np.inf  # the end of the previous __next__ on the thread
        i = 0
        while i < len(ts):
            j = i + 1  # the calls of the same step form one iterator's run
            while j < len(ts) and step[j] == step[i]:
                j += 1
            last_call = rt_end[rt_end <= ts[i]]
            k = np.searchsorted(seeds, ts[i], side="right") - 1
            seed = float(seeds[k]) if k >= 0 else -np.inf
            fresh = seed > previous and (not len(last_call) or seed >= last_call[-1]) and int(step[i]) >= 0
            if fresh:
                after = s[s >= end[j - 1]]
                stop = float(after[0]) if len(after) else float(end[j - 1])
                startup = _unrecorded(s, e, seed, float(ts[i]))
                wait = float((end[i:j] - ts[i:j]).sum())
                shutdown = stop - float(end[j - 1])
                w0, w1 = merge_intervals(np.array([seed, *ts[i:j], end[j - 1]]), np.array([float(ts[i]), *end[i:j], stop]))
                busy = float(busy_in_windows(g0, g1, w0, w1).sum()) if len(g0) else 0.0
                rows.append({LR_STEP: int(step[i]), LR_CALLS: j - i, LR_STARTUP_US: startup, LR_WAIT_US: wait,
                             LR_SHUTDOWN_US: shutdown, LR_GPU_IDLE_US: max(startup + wait + shutdown - busy, 0.0)})
            previous = float(end[j - 1])
            i = j
    return pd.DataFrame(rows, columns=list(LR_COLUMNS)) if rows else empty()
