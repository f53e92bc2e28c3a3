"""Host-side stalls behind the suggestion rules: syncs, pageable copies, DataLoader time, exposed communication."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.idle import dataloader_rows, host_gaps
from tracekit.analyzers.kernels import COMMUNICATION, NOT_COMPUTE
from tracekit.analyzers.names import matches
from tracekit.analyzers.windows import StepWindows
from tracekit.trace import tables
from tracekit.trace.grouping import rows_by_key
from tracekit.trace.intervals import busy_in_windows, busy_time_us, merge_intervals
from tracekit.trace.model import RankTrace

PAGEABLE_H2D = re.compile(r"^(?=.*Pageable)(?=.*(?:HtoD|->\s*Device))")  # lookaheads: linear time
PAGEABLE_D2H = re.compile(r"^(?=.*Pageable)(?=.*(?:DtoH|Device\s*->))")  # "Memcpy DtoH (Device -> Pageable)"
# A device-to-host copy into pageable memory counts as a bulk copy (pinned_memory's) from this many
# bytes: a tensor read back with .cpu() / .to('cpu') / .numpy() (the H200 held-out weight snapshot:
# 4-16 MiB weight matrices). The scalar reads of .item() / float(t) / bool(t) copy 1-8 bytes each
# (Memcpy DtoH in the sample traces' loss logging and decode loops) and stay avoid_sync's, as do the
# copies of small tensors below it (biases, norms: their sync, not their bytes, is the cost).
D2H_MIN_BYTES = 1 << 20
DIR_H2D, DIR_D2H = "h2d", "d2h"
SINGLE_PROCESS = re.compile(r"_SingleProcessDataLoaderIter")
ORIGIN_DEPTH = 4  # ancestors searched for the user-facing op behind a sync (aten::item, aten::to...)
# User-facing ops that sync, most specific first: the first found among a sync's ancestors names it.
SYNC_ORIGINS = (
    "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
    "aten::unique", "aten::_unique2", "aten::repeat_interleave", "aten::index", "aten::cpu",
    "aten::to", "aten::_to_copy", "aten::copy_", "aten::allclose", "aten::equal", "aten::is_nonzero",
)

# --- columns of Patterns.host_gaps (one row per long host silence: no launch or sync call) -------
HG_STEP = "step"  # the step of the call that ends it
HG_TS = "ts"
HG_GAP_US = "gap_us"
HG_GPU_IDLE_US = "gpu_idle_us"  # GPU idle inside it
HG_OPS = "ops"  # the top-level recorded CPU ops / user annotations inside it by total time, in words
HG_OP_US = "op_us"  # their total time
HG_AFTER_SYNC = "after_sync"  # the sync call that ended right where it begins ("" when none), with its origin
HG_IN_ENGINE = "in_engine"  # autograd's backward ops or an optimizer step cover most of it: not the loop's own host work
HOST_GAP_COLUMNS = (HG_STEP, HG_TS, HG_GAP_US, HG_GPU_IDLE_US, HG_OPS, HG_OP_US, HG_AFTER_SYNC, HG_IN_ENGINE)
# Recorded ranges of work that is the framework's, not the loop's: autograd's engine running backward
# (torch.autograd's per-node record_function names) and optimizer.step / zero_grad (torch.optim's
# record_function names "Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad")
ENGINE_OP = re.compile(r"^(autograd::engine::evaluate_function|Optimizer\.step#|Optimizer\.zero_grad#)")
# A gap is the engine's when ENGINE_OP ranges cover at least this share of it: a gap that starts at
# the last launch inside optimizer.step() and runs through the next batch's preprocessing touches the
# step's range for a few µs only (H200: a 67.5 ms numpy augmentation gap overlapped SGD.step by 46 µs).
ENGINE_COVER = 0.5
HG_TOP_OPS = 3  # names HG_OPS lists
HG_NAME_CHARS = 80  # of each name (trace names are untrusted: kept short)
STEP_MARK = re.compile(r"^ProfilerStep#")

# --- columns of Patterns.syncs (one row per host synchronisation call) ----------------------------
SY_STEP = "step"
SY_API = "api"  # cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize...
SY_ORIGIN = "origin"  # the user-facing op that synced (SYNC_ORIGINS), the innermost op, or "" (explicit)
SY_WAIT_US = "wait_us"  # the call's duration: CPU time spent waiting
SY_BUBBLE_US = "bubble_us"  # GPU idle from the call's end to the next GPU activity's start
SY_PAGEABLE = "pageable_copy"  # the same op call also issued a pageable copy (Patterns.copies' rows)

# --- columns of Patterns.copies (one row per pageable host-to-device memcpy, and per pageable
# device-to-host memcpy of at least D2H_MIN_BYTES) ---------------------------------------------------
CP_STEP = "step"
CP_DIRECTION = "direction"  # DIR_H2D | DIR_D2H
CP_BYTES = "bytes"
CP_COPY_US = "copy_us"  # GPU-side duration
CP_CALL_US = "call_us"  # the cudaMemcpy* call's duration (the CPU is blocked for pageable copies)

# --- columns of Patterns.dataloader (one row per step with DataLoader time) ----------------------
DL_STEP = "step"
DL_CALLS = "calls"
DL_US = "dataloader_us"  # union of top-level DataLoader op windows
DL_GPU_IDLE_US = "gpu_idle_us"  # GPU idle inside those windows
DL_SINGLE = "single_process"  # num_workers=0 (_SingleProcessDataLoaderIter)

# --- columns of Patterns.comm (one row per step with communication kernels) ----------------------
CM_STEP = "step"
CM_COLLECTIVES = "collectives"
CM_COMM_US = "comm_us"  # union of communication kernels
CM_COMPUTE_US = "compute_us"  # union of compute kernels (not comm, memcpy, memset)
CM_OVERLAP_US = "overlap_us"  # comm time with compute running
CM_EXPOSED_US = "exposed_us"  # comm time with no compute running
CM_LAST_EXPOSED_US = "last_exposed_us"  # exposed part of the step's last collective
CM_TOP = "top"  # name of the collective kernel with the most exposed time
SYNC_COLUMNS = (SY_STEP, SY_API, SY_ORIGIN, SY_WAIT_US, SY_BUBBLE_US, SY_PAGEABLE)
COPY_COLUMNS = (CP_STEP, CP_BYTES, CP_COPY_US, CP_CALL_US, CP_DIRECTION)
DATALOADER_COLUMNS = (DL_STEP, DL_CALLS, DL_US, DL_GPU_IDLE_US, DL_SINGLE)
COMM_COLUMNS = (CM_STEP, CM_COLLECTIVES, CM_COMM_US, CM_COMPUTE_US, CM_OVERLAP_US, CM_EXPOSED_US, CM_LAST_EXPOSED_US,
                CM_TOP)


@dataclass(frozen=True)
class StepsOf:
    """The step number of every row of a rank's tables (-1: in no step)."""

    gpu: np.ndarray
    runtime: np.ndarray
    ops: np.ndarray
    annotations: np.ndarray

    @classmethod
    def of(cls, rank: RankTrace, windows: StepWindows | None = None) -> StepsOf:
        """From step windows (ProfilerSteps, inferred repeats or the one pseudo-step -1), or from
        the loader's ProfilerStep columns when no windows are given."""
        if windows is None:
            return cls(rank.gpu[tables.GPU_STEP].to_numpy(), rank.runtime[tables.RT_STEP].to_numpy(),
                       rank.ops[tables.OP_STEP].to_numpy(), rank.annotations[tables.AN_STEP].to_numpy())
        return cls(windows.step_numbers(windows.gpu_pos), windows.step_numbers(windows.rt_pos),
                   windows.step_numbers(windows.op_pos), windows.step_numbers(windows.an_pos))


def _ancestor_names(ops: pd.DataFrame, row: int) -> list[str]:
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy()
    out: list[str] = []
    p = row
    while p >= 0 and len(out) <= ORIGIN_DEPTH:
        out.append(str(names[p]))
        p = int(parent[p])
    return out


def _origin(ops: pd.DataFrame, row: int) -> str:
    if row < 0:
        return ""
    chain = _ancestor_names(ops, row)
    for name in SYNC_ORIGINS:
        if name in chain:
            return name
    return chain[0]


def find_syncs(rank: RankTrace, steps: StepsOf | None = None) -> pd.DataFrame:
    """Host synchronisation calls (synchronous copies included) with the CPU wait and the GPU
    bubble that follows each."""
    rt, gpu, ops = rank.runtime, rank.gpu, rank.ops
    steps = steps or StepsOf.of(rank)
    cols = list(SYNC_COLUMNS)
    if not len(rt):
        return pd.DataFrame(columns=cols)
    is_sync = rt[tables.RT_KIND].isin(tables.SYNC_KINDS).to_numpy()
    sync = rt[is_sync]
    if not len(sync):
        return pd.DataFrame(columns=cols)
    starts = np.sort(gpu[tables.GPU_TS].to_numpy(dtype=float))
    ends = sync[tables.RT_END].to_numpy(dtype=float)
    nxt = np.searchsorted(starts, ends, side="left")
    has_next = nxt < len(starts)
    following = starts[np.minimum(nxt, len(starts) - 1)] if len(starts) else ends
    bubble = np.where(has_next, following - ends, 0.0)
    # GPU work still running at the call's end (another stream) means no bubble
    s_all, e_all = merge_intervals(gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float))
    busy_after = busy_in_windows(s_all, e_all, ends, ends + np.maximum(bubble, 0.0))
    bubble = np.maximum(bubble - busy_after, 0.0)
    pageable_ops = set(pageable_copies(gpu, rt, steps.gpu)[tables.RT_OP].tolist()) - {-1}
    op_rows = sync[tables.RT_OP].to_numpy()
    return pd.DataFrame({
        SY_STEP: steps.runtime[is_sync], SY_API: sync[tables.RT_NAME].to_numpy(dtype=object),
        SY_ORIGIN: [_origin(ops, int(r)) for r in op_rows],
        SY_WAIT_US: sync[tables.RT_DUR].to_numpy(dtype=float), SY_BUBBLE_US: bubble,
        SY_PAGEABLE: [int(r) in pageable_ops for r in op_rows],
    })


def pageable_copies(gpu: pd.DataFrame, rt: pd.DataFrame, gpu_steps: np.ndarray) -> pd.DataFrame:
    """Launch rows (runtime) of pageable host-to-device copies and of pageable device-to-host copies
    of at least D2H_MIN_BYTES, with the GPU row's fields (CP_DIRECTION says which)."""
    is_copy = (gpu[tables.GPU_KIND] == tables.KIND_MEMCPY).to_numpy()
    h2d = is_copy & matches(gpu[tables.GPU_NAME], PAGEABLE_H2D)
    big = gpu[tables.GPU_BYTES].to_numpy(dtype=float) >= D2H_MIN_BYTES
    d2h = is_copy & ~h2d & matches(gpu[tables.GPU_NAME], PAGEABLE_D2H) & big
    keep = h2d | d2h
    sel = gpu[keep]
    launch = sel[tables.GPU_LAUNCH].to_numpy()
    linked = launch >= 0
    call = np.full(len(sel), np.nan)
    op = np.full(len(sel), -1)
    if len(rt) and linked.any():
        call[linked] = rt[tables.RT_DUR].to_numpy(dtype=float)[launch[linked]]
        op[linked] = rt[tables.RT_OP].to_numpy()[launch[linked]]
    return pd.DataFrame({CP_STEP: gpu_steps[keep], CP_BYTES: sel[tables.GPU_BYTES].to_numpy(),
                         CP_COPY_US: sel[tables.GPU_DUR].to_numpy(dtype=float), CP_CALL_US: call,
                         CP_DIRECTION: np.where(d2h[keep], DIR_D2H, DIR_H2D).astype(object),
                         tables.RT_OP: op})


def find_copy_syncs(rank: RankTrace, steps: StepsOf | None = None) -> np.ndarray:
    """Per rank.runtime row: a sync call issued by the op call of a pageable copy of Patterns.copies
    (the copy's own wait for its staged chunks and the stream; SY_PAGEABLE's rows)."""
    rt = rank.runtime
    if not len(rt):
        return np.zeros(0, dtype=bool)
    steps = steps or StepsOf.of(rank)
    ops = set(pageable_copies(rank.gpu, rt, steps.gpu)[tables.RT_OP].tolist()) - {-1}
    return rt[tables.RT_KIND].isin(tables.SYNC_KINDS).to_numpy() & np.isin(rt[tables.RT_OP].to_numpy(), list(ops))


def find_copies(rank: RankTrace, steps: StepsOf | None = None) -> pd.DataFrame:
    """Pageable copies: host-to-device (the source tensor is not in pinned memory) and bulk
    device-to-host (.cpu() / .to('cpu') / .numpy() of at least D2H_MIN_BYTES into fresh pageable memory)."""
    steps = steps or StepsOf.of(rank)
    return pageable_copies(rank.gpu, rank.runtime, steps.gpu).drop(columns=[tables.RT_OP])


def find_dataloader(rank: RankTrace, steps: StepsOf | None = None) -> pd.DataFrame:
    """Per step: time in top-level DataLoader ops and annotations on the main thread (current
    PyTorch records `enumerate(DataLoader)#..._next__` as a user annotation, older as an op) and the
    GPU idle time inside it."""
    ops, gpu, an = rank.ops, rank.gpu, rank.annotations
    steps = steps or StepsOf.of(rank)
    cols = list(DATALOADER_COLUMNS)
    names, ts, end, step = [], [], [], []
    in_ops, in_an = dataloader_rows(rank)
    if len(ops):
        sel = in_ops
        names.append(ops[tables.OP_NAME].to_numpy(dtype=object)[sel])
        ts.append(ops[tables.OP_TS].to_numpy(dtype=float)[sel])
        end.append(ops[tables.OP_END].to_numpy(dtype=float)[sel])
        step.append(steps.ops[sel])
    if len(an):
        sel = in_an
        names.append(an[tables.AN_NAME].to_numpy(dtype=object)[sel])
        ts.append(an[tables.AN_TS].to_numpy(dtype=float)[sel])
        end.append(an[tables.AN_END].to_numpy(dtype=float)[sel])
        step.append(steps.annotations[sel])
    if not names or not sum(len(x) for x in names):
        return pd.DataFrame(columns=cols)
    dl_ts, dl_end, dl_step = np.concatenate(ts), np.concatenate(end), np.concatenate(step).astype(np.int64)
    single = matches(np.concatenate(names), SINGLE_PROCESS)
    s_all, e_all = merge_intervals(gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float))
    # each step's DataLoader intervals merged (one sort groups the rows by step), then the GPU's busy
    # time inside all of them in one pass (a loop of pandas groups cost ~0.5 ms a step)
    groups = rows_by_key(np.arange(len(dl_step)), dl_step)
    merged = [merge_intervals(dl_ts[idx], dl_end[idx]) for idx in groups.values()]
    w0, w1 = np.concatenate([m[0] for m in merged]), np.concatenate([m[1] for m in merged])
    owner = np.repeat(np.arange(len(merged)), [len(m[0]) for m in merged])
    length = np.bincount(owner, weights=w1 - w0, minlength=len(merged))
    busy = np.bincount(owner, weights=busy_in_windows(s_all, e_all, w0, w1), minlength=len(merged))
    return pd.DataFrame({DL_STEP: list(groups), DL_CALLS: [len(idx) for idx in groups.values()], DL_US: length,
                         DL_GPU_IDLE_US: length - busy, DL_SINGLE: [bool(single[idx].any()) for idx in groups.values()]},
                        columns=cols)


def find_comm(rank: RankTrace, classes: np.ndarray, steps: StepsOf | None = None) -> pd.DataFrame:
    """Per step: communication kernel time, how much of it overlaps compute kernels, and the rest."""
    gpu = rank.gpu
    steps = steps or StepsOf.of(rank)
    cols = list(COMM_COLUMNS)
    is_comm = classes == COMMUNICATION
    if not is_comm.any():
        return pd.DataFrame(columns=cols)
    is_compute = ~np.isin(classes, NOT_COMPUTE)
    ts, end = gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float)
    step = steps.gpu
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    rows = []
    computes = rows_by_key(np.flatnonzero(is_compute), step)  # one sort, not a scan of every row per step
    for s, idx in rows_by_key(np.flatnonzero(is_comm), step).items():
        k = computes.get(s, np.empty(0, dtype=np.int64))
        comm = busy_time_us(ts[idx], end[idx])
        compute = busy_time_us(ts[k], end[k])
        both = busy_time_us(np.concatenate([ts[idx], ts[k]]), np.concatenate([end[idx], end[k]]))
        exposed = both - compute
        ks, ke = merge_intervals(ts[k], end[k])
        per = (end[idx] - ts[idx]) - busy_in_windows(ks, ke, ts[idx], end[idx])
        last = idx[np.argmax(end[idx])]
        rows.append({CM_STEP: int(s), CM_COLLECTIVES: len(idx), CM_COMM_US: comm,
                     CM_COMPUTE_US: compute, CM_OVERLAP_US: comm - exposed, CM_EXPOSED_US: exposed,
                     CM_LAST_EXPOSED_US: float(per[idx == last][0]),
                     CM_TOP: str(names[idx[int(np.argmax(per))]])})
    return pd.DataFrame(rows, columns=cols)


@dataclass(frozen=True)
class _Recorded:
    """The top-level candidates among the recorded CPU ops and user annotations, sorted by start."""

    ts: np.ndarray
    end: np.ndarray
    parent_ts: np.ndarray  # start of the op's parent (NaN: none, or an annotation)
    parent_end: np.ndarray
    names: np.ndarray
    engine_ts: np.ndarray  # the ENGINE_OP ranges among them
    engine_end: np.ndarray

    @classmethod
    def of(cls, rank: RankTrace) -> _Recorded:
        ops, an = rank.ops, rank.annotations
        ts, end, pts, pend, names = [], [], [], [], []
        if len(ops):
            o_ts, o_end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
            parent = ops[tables.OP_PARENT].to_numpy()
            p = np.maximum(parent, 0)
            ts.append(o_ts)
            end.append(o_end)
            pts.append(np.where(parent >= 0, o_ts[p], np.nan))
            pend.append(np.where(parent >= 0, o_end[p], np.nan))
            names.append(ops[tables.OP_NAME].to_numpy(dtype=object))
        if len(an):
            a_names = an[tables.AN_NAME].to_numpy(dtype=object)
            keep = ~an[tables.AN_GPU].to_numpy(dtype=bool) & ~matches(a_names, STEP_MARK)
            ts.append(an[tables.AN_TS].to_numpy(dtype=float)[keep])
            end.append(an[tables.AN_END].to_numpy(dtype=float)[keep])
            pts.append(np.full(int(keep.sum()), np.nan))
            pend.append(np.full(int(keep.sum()), np.nan))
            names.append(a_names[keep])
        if not ts:
            empty = np.empty(0)
            return cls(empty, empty, empty, empty, np.empty(0, dtype=object), empty, empty)
        all_ts = np.concatenate(ts)
        order = np.argsort(all_ts, kind="stable")
        all_end, all_names = np.concatenate(end)[order], np.concatenate(names)[order]
        engine = matches(all_names, ENGINE_OP)
        return cls(all_ts[order], all_end, np.concatenate(pts)[order], np.concatenate(pend)[order], all_names,
                   all_ts[order][engine], all_end[engine])

    def engine_covers(self, a: float, b: float) -> bool:
        """Whether the recorded ENGINE_OP ranges (their union, clipped to (a, b)) cover at least
        ENGINE_COVER of (a, b)."""
        hit = (self.engine_ts < b) & (self.engine_end > a)
        if not hit.any() or b <= a:
            return False
        lo, hi = np.maximum(self.engine_ts[hit], a), np.minimum(self.engine_end[hit], b)
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], np.maximum.accumulate(hi[order])
        starts = np.maximum(lo, np.concatenate(([a], hi[:-1])))  # each range counted past the ones before it
        covered = float(np.clip(hi - starts, 0.0, None).sum())
        return covered >= ENGINE_COVER * (b - a)

    def inside(self, a: float, b: float) -> tuple[str, float]:
        """The top-level ones inside [a, b] (an op whose parent is also inside is not top-level), in
        words (HG_TOP_OPS names by total time), and their total time."""
        eps = 1e-3
        lo, hi = np.searchsorted(self.ts, [a - eps, b + eps], side="left")
        end, pts, pend = self.end[lo:hi], self.parent_ts[lo:hi], self.parent_end[lo:hi]
        parent_inside = (pts >= a - eps) & (pend <= b + eps)  # NaN compares False
        keep = (end <= b + eps) & ~parent_inside
        totals: dict[str, list[float]] = {}
        for name, dur in zip(self.names[lo:hi][keep], (end - self.ts[lo:hi])[keep], strict=True):
            totals.setdefault(str(name)[:HG_NAME_CHARS], []).append(float(dur))
        if not totals:
            return "", 0.0
        ranked = sorted(totals.items(), key=lambda kv: -sum(kv[1]))
        words = ", ".join(f"{name} ×{len(d)} ({sum(d) / 1e3:.2f} ms)" for name, d in ranked[:HG_TOP_OPS])
        if len(ranked) > HG_TOP_OPS:
            words += f", {len(ranked) - HG_TOP_OPS} more"
        return words, sum(sum(d) for d in totals.values())


def find_host_gaps(rank: RankTrace, steps: StepsOf | None = None) -> pd.DataFrame:
    """The host's long silences (tracekit.analyzers.idle.host_gaps: no launch or sync call for more
    than LONG_GAP_US, DataLoader windows left out) with the GPU idle inside each, what ran there and
    the sync that preceded it."""
    rt, gpu, ops = rank.runtime, rank.gpu, rank.ops
    steps = steps or StepsOf.of(rank)
    cols = list(HOST_GAP_COLUMNS)
    g0, g1 = host_gaps(rank)
    if not len(g0):
        return pd.DataFrame(columns=cols)
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    calls = np.flatnonzero(kind != tables.KIND_OTHER)
    call_ts = rt[tables.RT_TS].to_numpy(dtype=float)[calls]
    order = np.argsort(call_ts, kind="stable")
    calls, call_ts = calls[order], call_ts[order]
    rt_end = rt[tables.RT_END].to_numpy(dtype=float)
    is_sync = np.isin(kind, tables.SYNC_KINDS)
    sync_rows = np.flatnonzero(is_sync)
    s_all, e_all = merge_intervals(gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float))
    idle = (g1 - g0) - busy_in_windows(s_all, e_all, g0, g1)
    recorded = _Recorded.of(rank)
    rows = []
    for a, b, free in zip(g0.tolist(), g1.tolist(), idle.tolist(), strict=True):
        k = int(np.searchsorted(call_ts, b - 1e-3, side="left"))
        row = int(calls[min(k, len(calls) - 1)])
        ended = sync_rows[np.abs(rt_end[sync_rows] - a) < 1e-3]
        after = ""
        if len(ended):
            r = int(ended[0])
            origin = _origin(ops, int(rt[tables.RT_OP].to_numpy()[r])) if len(ops) else ""
            after = str(rt[tables.RT_NAME].to_numpy(dtype=object)[r])[:HG_NAME_CHARS]
            after += f" ({origin[:HG_NAME_CHARS]})" if origin else " (explicit)"
        words, op_us = recorded.inside(a, b)
        rows.append({HG_STEP: int(steps.runtime[row]), HG_TS: a, HG_GAP_US: b - a, HG_GPU_IDLE_US: float(free),
                     HG_OPS: words, HG_OP_US: op_us, HG_AFTER_SYNC: after,
                     HG_IN_ENGINE: recorded.engine_covers(a, b)})
    return pd.DataFrame(rows, columns=cols)
