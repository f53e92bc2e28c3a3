"""Top-level ops of a rank, computed once for the loop and request detectors: each op's outermost ancestor, the launches under it, per step and thread the top-level ops that issue work in time order, and their shapes as text."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_REPEATS = 2  # a block seen once is no repetition


def top_ops(ops: pd.DataFrame) -> np.ndarray:
    """Per op row: the row of its outermost ancestor (itself at depth 0)."""
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    rows = np.arange(len(parent))
    # pointer jumping: each pass doubles how far up `top` reaches, so ops nested d deep take
    # log2(d) passes; a parent row comes before its child (anything else is cut: no cycle)
    top = np.where((parent >= 0) & (parent < rows), parent, rows)
    while True:
        up = top[top]
        if np.array_equal(up, top):
            return top
        top = up


@dataclass(frozen=True)
class TopLevel:
    """Which top-level op issued each runtime call and GPU activity of a rank, and how many launch
    and sync calls each top-level op issued."""

    top: np.ndarray  # per ops row: the row of its outermost ancestor (itself at depth 0)
    rt_top: np.ndarray  # per runtime row: the top-level op that issued it (-1: no op)
    gpu_top: np.ndarray  # per gpu row: the top-level op whose launch call ran it (-1: none)
    launches: np.ndarray  # per ops row: LAUNCH_KINDS calls it issued as a top-level op (0 below the top level)
    syncs: np.ndarray  # per ops row: SYNC_KINDS calls, likewise

    @classmethod
    def of(cls, rank: RankTrace) -> TopLevel:
        ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
        top = top_ops(ops)
        rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
        rt_top = np.where(rt_op >= 0, top[np.maximum(rt_op, 0)], -1) if len(ops) else np.full(len(rt), -1)
        kinds = rt[tables.RT_KIND].to_numpy(dtype=object)
        launch = np.isin(kinds, tables.LAUNCH_KINDS) & (rt_top >= 0)
        sync = np.isin(kinds, tables.SYNC_KINDS) & (rt_top >= 0)
        gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
        gpu_top = np.where(gpu_launch >= 0, rt_top[np.maximum(gpu_launch, 0)], -1) if len(rt) \
            else np.full(len(gpu), -1, dtype=np.int64)
        return cls(top, rt_top, gpu_top, np.bincount(rt_top[launch], minlength=len(ops)),
                   np.bincount(rt_top[sync], minlength=len(ops)))


@dataclass(frozen=True)
class StepOps:
    """One step's depth-0 ops that issue a launch or sync call."""

    step: int
    rows: np.ndarray  # in row order
    threads: tuple[tuple[int, np.ndarray], ...]  # (thread id, its rows by start time, ties in row order), by thread id


def step_sequences(rank: RankTrace, steps: StepsOf, top: TopLevel) -> tuple[StepOps, ...]:
    """Per step (ascending; rows in no step left out): its depth-0 ops that issue launch or sync calls,
    per thread in time order — one stable sort for the whole rank."""
    ops = rank.ops
    rows = np.flatnonzero((ops[tables.OP_DEPTH].to_numpy() == 0) & ((top.launches + top.syncs) > 0))
    if not len(rows):
        return ()
    step_of = steps.ops[rows]
    rows = rows[step_of >= 0]
    if not len(rows):
        return ()
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    order = rows[np.argsort(ts[rows], kind="stable")]
    order = order[np.argsort(tid[order], kind="stable")]
    order = order[np.argsort(steps.ops[order], kind="stable")]
    step_sorted, tid_sorted = steps.ops[order], tid[order]
    cuts = np.flatnonzero((step_sorted[1:] != step_sorted[:-1]) | (tid_sorted[1:] != tid_sorted[:-1])) + 1
    bounds = [0, *cuts.tolist(), len(order)]
    out: list[StepOps] = []
    threads: list[tuple[int, np.ndarray]] = []
    step_list, tid_list = step_sorted.tolist(), tid_sorted.tolist()
    for a, b in itertools.pairwise(bounds):
        threads.append((tid_list[a], order[a:b]))
        if b == len(order) or step_list[b] != step_list[a]:
            out.append(StepOps(step_list[a], np.sort(np.concatenate([s for _, s in threads])), tuple(threads)))
            threads = []
    return tuple(out)


def dims_texts(rank: RankTrace, rows: np.ndarray, texts: dict[bytes, str]) -> list[str]:
    """Per op row, str() of its decoded Input Dims (None when it recorded none), formatted once per
    distinct raw value (steps repeat the same shapes): `texts` holds those formatted so far."""
    store = rank.op_input_store
    if store is None:
        return [str(rank.op_inputs(r).get(tables.OP_INPUT_DIMS)) for r in rows.tolist()]
    out = []
    for r, raw in zip(rows.tolist(), store.raw_values(rows, tables.OP_INPUT_DIMS), strict=True):
        text = texts.get(raw)
        if text is None:
            text = texts[raw] = str(rank.op_inputs(r).get(tables.OP_INPUT_DIMS))
        out.append(text)
    return out


def text_codes(texts: list[str] | np.ndarray) -> np.ndarray:
    """Per item an int, equal for equal texts, numbered by first appearance."""
    slot: dict[object, int] = {}
    return np.fromiter((slot.setdefault(t, len(slot)) for t in texts), dtype=np.int64, count=len(texts))


def repeated_block(codes: np.ndarray, min_repeats: int = MIN_REPEATS) -> tuple[int, int, int] | None:
    """(start, period, repeats) of the longest stretch of `codes` that is one block repeated at least
    `min_repeats` times, found from a code whose occurrences are evenly spaced; None when there is none.
    Codes are tried in order of first appearance; the first of equally long stretches wins."""
    n = len(codes)
    if n < max(min_repeats, MIN_REPEATS):
        return None
    order = np.argsort(codes, kind="stable")  # positions grouped by code, ascending within a code
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    counts = np.diff(np.r_[starts, n])
    gaps = np.diff(order)  # gaps[i]: from order[i] to order[i + 1], inside a code when i + 1 is not a start
    inner = np.ones(n - 1, dtype=bool)
    inner[starts[1:] - 1] = False
    period = np.where(counts >= 2, gaps[np.minimum(starts, n - 2)], 0)
    # a code is evenly spaced when every inner gap equals its first gap
    code_of_gap = np.repeat(np.arange(len(starts)), counts)[:-1]
    uneven = np.bincount(code_of_gap[inner & (gaps != period[code_of_gap])], minlength=len(starts)) > 0
    first = order[starts]
    ok = (counts >= max(min_repeats, MIN_REPEATS)) & ~uneven & (period > 0)
    best: tuple[int, int, int] | None = None
    tried: set[tuple[int, int]] = set()  # (period, start): a block found, its rotations need no check
    for g in np.flatnonzero(ok)[np.argsort(first[ok], kind="stable")].tolist():
        p, start, k = int(period[g]), int(first[g]), int(counts[g])
        if start + k * p > n or not (codes[start:start + k * p].reshape(k, p) == codes[start:start + p]).all():
            # the code sits late in the block (the block starts with ops it repeats, e.g. a layer's, or
            # the op after the last repetition differs from the block's first): the block starts up to
            # p − 1 ops before it
            start = next((s for s in range(start - 1, max(start - p, -1), -1) if s + k * p <= n
                          and (codes[s:s + k * p].reshape(k, p) == codes[s:s + p]).all()), -1)
            if start < 0:
                continue
        if any((p, s) in tried for s in range(max(start - p + 1, 0), start + 1)):
            continue
        stretch = codes[start:start + k * p].reshape(k, p)
        if not (stretch == stretch[0]).all():
            continue
        tried.add((p, start))
        if best is None or k * p > best[1] * best[2]:
            best = (start, p, k)
    return best


def launching_bodies(seqs: tuple[StepOps, ...], launches: np.ndarray, names: np.ndarray, min_repeats: int,
                     min_ops: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """(step, thread, body) for each step and thread whose top-level ops that launch work hold one block
    (by op names, ≥ `min_ops` ops) repeated ≥ `min_repeats` times back to back; `body`: the block's op
    rows, repetitions × ops (`launches`: TopLevel.launches; `names`: the ops' names)."""
    for step_ops in seqs:
        for thread, working in step_ops.threads:
            seq = working[launches[working] > 0]
            if len(seq) < min_repeats * min_ops:
                continue
            found = repeated_block(text_codes([str(n) for n in names[seq].tolist()]), min_repeats)
            if found is None or found[1] < min_ops:
                continue
            start, period, repeats = found
            yield int(step_ops.step), int(thread), seq[start:start + period * repeats].reshape(repeats, period)
