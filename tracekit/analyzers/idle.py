"""Why the GPU idles: each idle interval of a step split by what the CPU was doing (loading, syncing, copying, launching)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers import names
from tracekit.analyzers.kernels import COMMUNICATION as COMM_CLASS
from tracekit.analyzers.kernels import NOT_COMPUTE
from tracekit.analyzers.windows import StepWindows
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace

# An idle gap the CPU caused is "launch" time when it is at most this long (the eager dispatch and
# launch path between two kernels); a longer gap with no launch is CPU work (Python, CPU ops).
LONG_GAP_US = 1000.0
QUEUED_EPS_US = 1e-3  # a launch that returned before the gap began: the GPU, not the CPU, waited
# A kernel launched on an idle GPU starts about this long after its launch call returns; a gap that
# lasts longer after the launch returned is the GPU's own wait (a dependency, a busy engine).
LAUNCH_LATENCY_US = 20.0
# A GPU-side gap (the next activity already launched) longer than this is not the GPU's own pace
# (kernel-to-kernel dispatch takes microseconds): with nothing recorded running, the GPU waited on
# something the trace does not show (work outside it, another process or rank, a cross-stream wait
# on unrecorded work, or a CPU/GPU clock offset). Such gaps are UNEXPLAINED, never GPU time.
STALL_US = 50.0
DATALOADER = re.compile(r"DataLoader")
PAGEABLE = re.compile(r"Pageable")

# Per-step components, µs (additive; together with GPU busy they make up the step's span).
GPU_GAP = "gpu_gap_us"  # idle while the next activity was already launched (GPU-side dependency)
LAUNCH_GAP = "launch_gap_us"  # idle waiting for launches: CPU-late gaps ≤ LONG_GAP_US
DATA_WAIT = "data_wait_us"  # idle while the main thread is in the DataLoader
SYNC_WAIT = "sync_wait_us"  # idle from a host sync until the CPU launched again, less host work between (the drained queue)
COPY_WAIT = "copy_wait_us"  # idle while the CPU is blocked in a synchronous or pageable copy call
CPU_WAIT = "cpu_wait_us"  # idle in longer CPU-late gaps: Python or CPU ops between launches
PAGEABLE_COPY = "pageable_copy_us"  # GPU time of copies from/to pageable host memory
COMM_EXPOSED = "comm_exposed_us"  # communication kernels with no compute beside them
P2P_EXPOSED = "p2p_exposed_us"  # ... of which point-to-point (SendRecv, send/recv): pipeline bubbles
P2P = re.compile(r"SendRecv|[Ss]end[_A-Z]|[Rr]ecv[_A-Z]|_p2p|P2p|P2P")
UNEXPLAINED = "unexplained_us"  # GPU-side gaps over STALL_US: nothing recorded held the GPU
COMPONENTS = (GPU_GAP, UNEXPLAINED, LAUNCH_GAP, DATA_WAIT, SYNC_WAIT, COPY_WAIT, CPU_WAIT, PAGEABLE_COPY, COMM_EXPOSED, P2P_EXPOSED)


def _idle_intervals(starts: np.ndarray, ends: np.ndarray, windows: StepWindows) -> tuple[np.ndarray, ...]:
    """(window position, start, end) of every GPU-idle interval inside the windows."""
    pos_out, a_out, b_out = [], [], []
    for p, (w0, w1) in enumerate(zip(windows.ts.tolist(), windows.end.tolist(), strict=True)):
        lo = np.searchsorted(ends, w0, side="right")
        hi = np.searchsorted(starts, w1, side="left")
        s, e = starts[lo:hi], ends[lo:hi]
        a = np.concatenate([[w0], np.minimum(e, w1)])
        b = np.concatenate([np.maximum(s, w0), [w1]])
        keep = b > a
        pos_out.append(np.full(int(keep.sum()), p))
        a_out.append(a[keep])
        b_out.append(b[keep])
    if not pos_out:
        return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    return np.concatenate(pos_out).astype(np.int64), np.concatenate(a_out), np.concatenate(b_out)


def _union(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return merge_intervals(ts, end) if len(ts) else (np.empty(0), np.empty(0))


def dataloader_rows(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Bool masks over rank.ops and rank.annotations of the DataLoader's windows on the main thread:
    top-level DataLoader ops (older PyTorch) and CPU annotations (`enumerate(DataLoader)#..._next__`)."""
    ops, an = rank.ops, rank.annotations
    in_ops = (ops[tables.OP_PARENT].to_numpy() < 0) & names.matches(ops[tables.OP_NAME], DATALOADER) if len(ops) \
        else np.zeros(0, dtype=bool)
    in_an = ~an[tables.AN_GPU].to_numpy(dtype=bool) & names.matches(an[tables.AN_NAME], DATALOADER) if len(an) \
        else np.zeros(0, dtype=bool)
    return in_ops, in_an


def _dataloader_windows(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Union of the DataLoader windows (dataloader_rows)."""
    in_ops, in_an = dataloader_rows(rank)
    ops, an = rank.ops, rank.annotations
    ts = [ops[tables.OP_TS].to_numpy(dtype=float)[in_ops]] if len(ops) else []
    end = [ops[tables.OP_END].to_numpy(dtype=float)[in_ops]] if len(ops) else []
    if len(an):
        ts.append(an[tables.AN_TS].to_numpy(dtype=float)[in_an])
        end.append(an[tables.AN_END].to_numpy(dtype=float)[in_an])
    if not ts:
        return np.empty(0), np.empty(0)
    return _union(np.concatenate(ts), np.concatenate(end))


def _pageable(gpu: pd.DataFrame) -> np.ndarray:
    return (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_MEMCPY) & names.matches(gpu[tables.GPU_NAME], PAGEABLE)


def _copy_call_windows(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Calls that block the CPU while data moves: synchronous copies and pageable async copies."""
    rt, gpu = rank.runtime, rank.gpu
    if not len(rt):
        return np.empty(0), np.empty(0)
    blocking = rt[tables.RT_KIND].to_numpy(dtype=object) == tables.SYNC_COPY
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    pageable_launch = launch[_pageable(gpu) & (launch >= 0)]
    blocking[pageable_launch] = True
    return _union(rt[tables.RT_TS].to_numpy(dtype=float)[blocking], rt[tables.RT_END].to_numpy(dtype=float)[blocking])


def _sync_windows(rank: RankTrace, gpu_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From each host sync call's start until the next GPU activity starts after it returned, less
    the host work after the call: when the next launch or sync call starts more than LONG_GAP_US
    after the sync returned, the CPU was busy (Python, CPU ops), not blocked, until that call."""
    rt = rank.runtime
    if not len(rt) or not len(gpu_starts):
        return np.empty(0), np.empty(0)
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    all_ts, all_end = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_END].to_numpy(dtype=float)
    sel = np.isin(kind, tables.SYNC_KINDS)
    ts, end = all_ts[sel], all_end[sel]
    nxt = np.searchsorted(gpu_starts, end, side="left")
    has = nxt < len(gpu_starts)
    stop = np.maximum(np.where(has, gpu_starts[np.minimum(nxt, len(gpu_starts) - 1)], end), end)
    calls = np.sort(all_ts[kind != tables.KIND_OTHER])
    k = np.searchsorted(calls, end, side="left")
    after = np.where(k < len(calls), calls[np.minimum(k, len(calls) - 1)], np.inf)
    busy = after - end > LONG_GAP_US  # host work between the sync and the next call
    resume = np.where(busy, np.minimum(after, stop), end)
    return _union(np.concatenate([ts, resume]), np.concatenate([np.where(busy, end, stop), stop]))


def subtract(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint sorted intervals (a0, a1) less the disjoint sorted intervals (b0, b1)."""
    out0: list[float] = []
    out1: list[float] = []
    for s, e in zip(a0.tolist(), a1.tolist(), strict=True):
        cur, j = s, int(np.searchsorted(b1, s, side="right"))
        while j < len(b0) and b0[j] < e:
            if b0[j] > cur:
                out0.append(cur)
                out1.append(float(b0[j]))
            cur = max(cur, float(b1[j]))
            j += 1
        if cur < e:
            out0.append(cur)
            out1.append(e)
    return np.asarray(out0, dtype=float), np.asarray(out1, dtype=float)


def host_gaps(rank: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """The host's long silences: from the end of a launch or sync call (any thread) to the start of
    the next one when that is more than LONG_GAP_US later, less the DataLoader windows (pieces of at
    least LONG_GAP_US kept). No GPU work is launched there: the main thread runs Python or CPU ops."""
    rt = rank.runtime
    if not len(rt):
        return np.empty(0), np.empty(0)
    sel = rt[tables.RT_KIND].to_numpy(dtype=object) != tables.KIND_OTHER
    s, e = _union(rt[tables.RT_TS].to_numpy(dtype=float)[sel], rt[tables.RT_END].to_numpy(dtype=float)[sel])
    a, b = e[:-1], s[1:]
    keep = b - a > LONG_GAP_US
    g0, g1 = subtract(a[keep], b[keep], *_dataloader_windows(rank))
    long = g1 - g0 >= LONG_GAP_US
    return g0[long], g1[long]


def _covered(a: np.ndarray, b: np.ndarray, union: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return busy_in_windows(union[0], union[1], a, b) if len(a) else np.empty(0)


def _merge(*unions: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return _union(np.concatenate([u[0] for u in unions]), np.concatenate([u[1] for u in unions]))


def idle_components(rank: RankTrace, windows: StepWindows, classes: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per step (position in `windows`): the COMPONENTS, in µs.

    Every GPU-idle interval of a step is split by what held the next GPU activity back. If that
    activity's launch call returned before the interval began, the GPU waited on itself (GPU_GAP;
    UNEXPLAINED when that GPU-side part is longer than STALL_US).
    Otherwise the CPU was late until the launch call returned plus LAUNCH_LATENCY_US (the rest of
    the interval is GPU_GAP), and that late part is carved, in this order, by the DataLoader
    windows on the main thread (DATA_WAIT), blocking copy calls (COPY_WAIT) and the time from a host
    sync until the next GPU activity (SYNC_WAIT) less the host work after it (more than LONG_GAP_US
    before the next launch or sync call: the CPU was busy, not blocked); what is left is LAUNCH_GAP when the late part is
    at most LONG_GAP_US long, else CPU_WAIT. The tail of a step, with no activity after it, is late. PAGEABLE_COPY and COMM_EXPOSED are busy GPU time that
    the host or other ranks hold back: copies from pageable memory, and collectives running with no
    compute kernel beside them.
    """
    n = len(windows)
    out = {name: np.zeros(n) for name in COMPONENTS}
    gpu, rt = rank.gpu, rank.runtime
    if n == 0 or not len(gpu):
        return out
    g_ts, g_end = gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float)
    starts, ends = merge_intervals(g_ts, g_end)
    pos, a, b = _idle_intervals(starts, ends, windows)
    order = np.argsort(g_ts, kind="stable")
    sorted_ts = g_ts[order]
    if len(a):
        # the activity the GPU waited for: the first one starting at or after the interval's end
        k = np.searchsorted(sorted_ts, b - QUEUED_EPS_US, side="left")
        has_next = k < len(order)
        nxt = order[np.minimum(k, len(order) - 1)]
        launch = gpu[tables.GPU_LAUNCH].to_numpy()[nxt]
        has_rt = len(rt) > 0
        rt_end = rt[tables.RT_END].to_numpy(dtype=float) if has_rt else np.empty(0)
        safe = np.maximum(launch, 0)
        launched_end = np.where(launch >= 0, rt_end[safe] if has_rt else np.inf, np.inf)
        # no next activity (the step's tail) or one whose launch call returned after the gap began:
        # the CPU was late until that call returned (plus the launch latency); an activity with no
        # launch in the trace, or launched before the gap began, means the GPU waited on itself
        length = b - a
        queued = has_next & ((launch < 0) | (launched_end < a - QUEUED_EPS_US))
        late_len = np.where(has_next, np.clip(launched_end - a + LAUNCH_LATENCY_US, 0.0, length), length)
        late_len = np.where(queued, 0.0, late_len)
        late_end = a + late_len
        data = _dataloader_windows(rank)
        copies = _copy_call_windows(rank)
        syncs = _sync_windows(rank, sorted_ts)
        c_data = _covered(a, late_end, data)
        c_copy = _covered(a, late_end, _merge(data, copies)) - c_data
        c_sync = _covered(a, late_end, _merge(data, copies, syncs)) - c_data - c_copy
        rest = np.maximum(late_len - c_data - c_copy - c_sync, 0.0)
        long = late_len > LONG_GAP_US
        gpu_side = length - late_len
        stalled = gpu_side > STALL_US
        parts = {
            GPU_GAP: np.where(stalled, 0.0, gpu_side),
            UNEXPLAINED: np.where(stalled, gpu_side, 0.0),
            DATA_WAIT: c_data,
            COPY_WAIT: c_copy,
            SYNC_WAIT: c_sync,
            LAUNCH_GAP: np.where(long, 0.0, rest),
            CPU_WAIT: np.where(long, rest, 0.0),
        }
        for name, values in parts.items():
            out[name] = np.bincount(pos, weights=values, minlength=n).astype(float)
    w0, w1 = windows.ts, windows.end
    pageable = _pageable(gpu)
    if pageable.any():
        out[PAGEABLE_COPY] = busy_in_windows(*_union(g_ts[pageable], g_end[pageable]), w0, w1)
    if classes is not None and len(classes) == len(gpu):
        comm = classes == COMM_CLASS
        if comm.any():
            compute = ~np.isin(classes, NOT_COMPUTE)
            both = comm | compute
            alone = busy_in_windows(*_union(g_ts[compute], g_end[compute]), w0, w1)
            out[COMM_EXPOSED] = busy_in_windows(*_union(g_ts[both], g_end[both]), w0, w1) - alone
            p2p = comm & names.matches(gpu[tables.GPU_NAME], P2P)
            if p2p.any():
                with_p2p = p2p | compute
                out[P2P_EXPOSED] = busy_in_windows(*_union(g_ts[with_p2p], g_end[with_p2p]), w0, w1) - alone
    return out
