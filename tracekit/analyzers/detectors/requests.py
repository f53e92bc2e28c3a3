"""Requests served one at a time: a step made of the same forward repeated k times at batch 1 with the same shapes (an encoder or classifier called once per request), which one forward at batch k would do."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.foreach import top_ops
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_REQUESTS = 2  # forwards per step: fewer is one request, nothing to batch it with
# Launches of the step outside the repeated forwards: at most this share of one forward's. A single
# forward whose layers repeat has its embedding before them and its head after (a layer stack is not
# a request loop: each layer's input is the previous layer's output).
OUTSIDE_SHARE = 0.25
BATCH_ONE_SHARE = 0.5  # at least this share of the forward's launching ops read a tensor whose first dim is 1

# --- columns of Patterns.requests (one row per step served as repeated batch-1 forwards) -------------
RQ_STEP = "step"
RQ_THREAD = "thread"
RQ_REQUESTS = "requests"  # forwards in the step
RQ_OPS = "ops"  # top-level ops of one forward that launch work
RQ_FIRST = "first"  # the forward's first op with its input shapes, in words
RQ_LAUNCHES = "launches"  # launch calls of one forward
RQ_GPU_US = "gpu_us"  # GPU time of all the forwards' activities
REQUEST_COLUMNS = (RQ_STEP, RQ_THREAD, RQ_REQUESTS, RQ_OPS, RQ_FIRST, RQ_LAUNCHES, RQ_GPU_US)
FIRST_CHARS = 120  # of RQ_FIRST (trace names and shapes are untrusted text: kept short)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(REQUEST_COLUMNS))


def _signature(rank: RankTrace, row: int, name: str) -> str:
    return f"{name}{rank.op_inputs(row).get(tables.OP_INPUT_DIMS)}"


def _batch_one(rank: RankTrace, row: int) -> bool:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return any(isinstance(d, list) and len(d) >= 2 and d[0] == 1 for d in dims)


def repeated_block(sigs: list[str], min_repeats: int = MIN_REQUESTS) -> tuple[int, int, int] | None:
    """(start, period, repeats) of the longest stretch of `sigs` that is one block repeated at least
    `min_repeats` times, found from a signature whose calls are evenly spaced; None when there is none."""
    best: tuple[int, int, int] | None = None
    codes = np.unique(np.asarray(sigs, dtype=object), return_inverse=True)[1].astype(np.int64)
    positions: dict[int, list[int]] = {}
    for i, c in enumerate(codes.tolist()):
        positions.setdefault(c, []).append(i)
    tried: set[tuple[int, int]] = set()  # (period, start): a block found, its rotations need no check
    for pos in positions.values():
        if len(pos) < max(min_repeats, 2):
            continue
        period, start = pos[1] - pos[0], pos[0]
        if any(b - a != period for a, b in itertools.pairwise(pos)):
            continue
        if start + len(pos) * period > len(sigs):
            # the signature sits late in the block (the block starts with ops it repeats, e.g. a layer's):
            # the block starts up to period − 1 ops before it
            start = next((s for s in range(start - 1, max(start - period, -1), -1) if s + len(pos) * period <= len(sigs)
                          and (codes[s:s + len(pos) * period].reshape(len(pos), period) == codes[s:s + period]).all()), -1)
            if start < 0:
                continue
        if any((period, s) in tried for s in range(max(start - period + 1, 0), start + 1)):
            continue
        stretch = codes[start:start + len(pos) * period].reshape(len(pos), period)
        if not (stretch == stretch[0]).all():
            continue
        tried.add((period, start))
        if best is None or len(pos) * period > best[1] * best[2]:
            best = (start, period, len(pos))
    return best


def find_requests(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per step whose launching thread runs the same forward k ≥ MIN_REQUESTS times at batch 1
    (REQUEST_COLUMNS), and per rank.gpu row whether one of those forwards launched it."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    in_request = np.zeros(len(gpu), dtype=bool)
    if not len(ops) or not len(rt) or not len(gpu):
        return empty(), in_request
    top = top_ops(ops)
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    rt_top = np.where(rt_op >= 0, top[np.maximum(rt_op, 0)], -1)
    working = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS + tables.SYNC_KINDS) & (rt_top >= 0)
    launches = np.bincount(rt_top[working], minlength=len(ops))
    depth0 = np.flatnonzero((ops[tables.OP_DEPTH].to_numpy() == 0) & (launches > 0))
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_top = np.where(gpu_launch >= 0, rt_top[np.maximum(gpu_launch, 0)], -1)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    rows = []
    for step in np.unique(steps.ops[depth0]).tolist():
        if step < 0:
            continue
        mine = depth0[steps.ops[depth0] == step]
        thread = Counter(tid[mine].tolist()).most_common(1)[0][0]
        seq = mine[tid[mine] == thread]
        seq = seq[np.argsort(ts[seq], kind="stable")]
        sigs = [_signature(rank, int(r), str(names[r])) for r in seq.tolist()]
        found = repeated_block(sigs)
        if found is None:
            continue
        start, period, repeats = found
        covered = seq[start:start + period * repeats]
        outside = int(launches[mine].sum() - launches[covered].sum())
        one = seq[start:start + period]
        per_forward = int(launches[one].sum())
        batch_one = sum(_batch_one(rank, int(r)) for r in one.tolist())
        if start > 0 and launches[seq[:start]].sum() > 0:
            continue  # work before the first forward on its thread: the repeats are a forward's layers
        if outside > OUTSIDE_SHARE * per_forward or batch_one < BATCH_ONE_SHARE * period:
            continue
        hit = np.isin(gpu_top, covered)
        in_request |= hit
        first = sigs[start][:FIRST_CHARS]
        rows.append({RQ_STEP: int(step), RQ_THREAD: int(thread), RQ_REQUESTS: repeats,
                     RQ_OPS: " → ".join(str(names[r]).removeprefix("aten::") for r in one.tolist())[:FIRST_CHARS],
                     RQ_FIRST: first, RQ_LAUNCHES: per_forward, RQ_GPU_US: float(gpu_dur[hit].sum())})
    return pd.DataFrame(rows, columns=list(REQUEST_COLUMNS)), in_request
