"""Link the tables: launch API <-> GPU activity (correlation, flows), op nesting, issuing op, step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.nesting import depth_of, enclosing, group_codes

EPS_US = 1e-3  # tolerance of time containment: timestamps carry ns fractions of a µs


def link_launches(gpu: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """Row in `runtime` of the launch call behind each GPU activity (-1 if none), by correlation id."""
    launch_rows = runtime[runtime[tables.RT_KIND].isin(tables.LINKED_KINDS) & (runtime[tables.RT_CORRELATION] >= 0)]
    index = pd.Index(launch_rows[tables.RT_CORRELATION].to_numpy())
    positions = launch_rows.index.to_numpy()
    if not index.is_unique:
        keep = ~index.duplicated()
        index, positions = index[keep], positions[keep]
    hit = index.get_indexer(gpu[tables.GPU_CORRELATION].to_numpy())
    out = np.where(hit >= 0, positions[np.maximum(hit, 0)] if len(positions) else -1, -1)
    out[gpu[tables.GPU_CORRELATION].to_numpy() < 0] = -1
    return out.astype(np.int64)


def nest_ops(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent row of each op on its own thread; ops must be sorted by (ts, -dur). A stack
    sweep per (pid, tid) that pops the ops ending more than EPS_US before the next start; vectorised
    (trace.nesting) when the starts are numbers in order."""
    if len(ops):
        ends = ops[tables.OP_END].to_numpy(dtype=float)
        parent = enclosing(ops[tables.OP_TS].to_numpy(dtype=float), ends + EPS_US,
                           group_codes(ops[tables.OP_PID].to_numpy(), ops[tables.OP_TID].to_numpy()))
        if parent is not None:
            return depth_of(parent), parent
    return _nest_sweep(ops)


def _nest_sweep(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """nest_ops by the sweep itself."""
    n = len(ops)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return depth, parent
    ends = ops[tables.OP_END].to_numpy().tolist()
    starts = ops[tables.OP_TS].to_numpy().tolist()
    stacks: dict = {}
    pids, tids = ops[tables.OP_PID].tolist(), ops[tables.OP_TID].tolist()
    dep, par = depth.tolist(), parent.tolist()
    for i in range(n):
        stack = stacks.setdefault((pids[i], tids[i]), [])
        start = starts[i]
        while stack and ends[stack[-1]] + EPS_US < start:
            stack.pop()
        if stack:
            par[i] = stack[-1]
            dep[i] = len(stack)
        stack.append(i)
    return np.array(dep, dtype=np.int64), np.array(par, dtype=np.int64)


def issuing_ops(runtime: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Innermost op that issued each runtime call: by External id when it is consistent in time
    and thread, else by time containment on the calling thread."""
    n = len(runtime)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(ops) == 0:
        return out
    op_ext = ops[tables.OP_EXTERNAL_ID].to_numpy()
    valid = op_ext >= 0
    ext_index = pd.Index(op_ext[valid])
    ext_rows = np.flatnonzero(valid)
    if not ext_index.is_unique:
        keep = ~ext_index.duplicated(keep="last")
        ext_index, ext_rows = ext_index[keep], ext_rows[keep]
    rt_ext = runtime[tables.RT_EXTERNAL_ID].to_numpy()
    hit = ext_index.get_indexer(rt_ext)
    cand = np.where((hit >= 0) & (rt_ext >= 0), ext_rows[np.maximum(hit, 0)] if len(ext_rows) else -1, -1)
    rt_ts = runtime[tables.RT_TS].to_numpy()
    op_ts, op_end = ops[tables.OP_TS].to_numpy(), ops[tables.OP_END].to_numpy()
    ok = cand >= 0
    c = np.maximum(cand, 0)
    ok &= (op_ts[c] - EPS_US <= rt_ts) & (rt_ts <= op_end[c] + EPS_US)
    ok &= _same_thread(runtime, ops, c)
    out[ok] = cand[ok]
    rest = np.flatnonzero(~ok)
    if len(rest):
        out[rest] = _containing_ops(runtime.iloc[rest], ops)
    return out


def _same_thread(runtime: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Whether each runtime call ran on the (pid, tid) of op `rows[i]`."""
    same = np.ones(len(runtime), dtype=bool)
    for op_col, rt_col in ((tables.OP_PID, tables.RT_PID), (tables.OP_TID, tables.RT_TID)):
        a, b = ops[op_col].to_numpy()[rows], runtime[rt_col].to_numpy()
        if a.dtype == object or b.dtype == object:
            same &= np.array([x == y for x, y in zip(a, b, strict=True)], dtype=bool)
        else:
            same &= a == b
    return same


def _containing_ops(calls: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Innermost op enclosing each call on the same (pid, tid), by time."""
    out = np.full(len(calls), -1, dtype=np.int64)
    parent = ops[tables.OP_PARENT].to_numpy()
    op_end = ops[tables.OP_END].to_numpy()
    groups = ops.groupby([tables.OP_PID, tables.OP_TID], sort=False).indices
    call_keys = list(zip(calls[tables.RT_PID].tolist(), calls[tables.RT_TID].tolist(), strict=True))
    call_ts = calls[tables.RT_TS].to_numpy()
    by_thread: dict = {}
    for i, key in enumerate(call_keys):
        by_thread.setdefault(key, []).append(i)
    for key, idxs in by_thread.items():
        rows = groups.get(key)
        if rows is None:
            continue
        starts = ops[tables.OP_TS].to_numpy()[rows]
        idxs_arr = np.array(idxs)
        pos = np.searchsorted(starts, call_ts[idxs_arr] + EPS_US, side="right") - 1
        for i, p in zip(idxs_arr.tolist(), pos.tolist(), strict=True):
            r = int(rows[p]) if p >= 0 else -1
            t = call_ts[i]
            while r >= 0 and op_end[r] + EPS_US < t:
                r = int(parent[r])
            out[i] = r
    return out


def step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """ProfilerStep number containing each time (-1 outside every step)."""
    if len(steps) == 0 or len(times) == 0:
        return np.full(len(times), -1, dtype=np.int64)
    starts = steps[tables.STEP_TS].to_numpy()
    ends = steps[tables.STEP_END].to_numpy()
    numbers = steps[tables.STEP_NUMBER].to_numpy()
    pos = np.searchsorted(starts, times, side="right") - 1
    p = np.maximum(pos, 0)
    inside = (pos >= 0) & (times <= ends[p] + EPS_US)
    return np.where(inside, numbers[p], -1).astype(np.int64)
