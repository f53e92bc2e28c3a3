"""Attention heads written as separate modules called in turn on one input: a block of narrow GEMMs (N = the head's width) that all read the same activation, repeated k ≥ 4 times back to back with weights of its own each time; one Linear(d, 3·d) and one SDPA call over all heads would do the block once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.ensembles import (
    BACKWARD,
    EN_DIRECTION,
    EN_FIRST,
    EN_GEMMS,
    EN_GPU_US,
    EN_HOST_US,
    EN_KIND,
    EN_LAUNCHES,
    EN_MEMBERS,
    EN_OPS,
    EN_STEP,
    EN_THREAD,
    ENSEMBLE_COLUMNS,
    FORWARD,
    KIND_HEADS,
    TEXT_CHARS,
    block_signatures,
    empty,
    has_accumulate_grad,
    input_dims,
    top_level,
)
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.kernels import GEMM
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# Heads per block: multi-head attention has 4 or more (GPT-2 small 12, the tutorials' 4–6).
MIN_HEADS = 4
# Launching ops of one head's forward (q, k, v projections and the attention: 4) and of its backward
# (the attention's, three weight/input gradients and their dtype casts: 11 under bf16 autocast), with room.
MAX_FORWARD_PERIOD = 16
# GEMMs of one head on the shared input: query, key and value (2 where keys and values share one). One
# narrow GEMM per repetition is a row of towers or experts (hta's trace_diff control trace: 7 ×
# Linear(256, 32) and a cat), not attention heads: left out.
MIN_PROJECTIONS = 2
MAX_BACKWARD_PERIOD = 32
# Heads laid out projection by projection (projection_blocks): a block is one projection's h GEMMs and
# the op that stacks them (GPT-2 small's 12 heads: 13 ops); q, k and v (or k and v) repeat it 2–3 times.
MAX_PROJECTION_PERIOD = 2 * 16 + 2
MAX_PROJECTIONS = 3
EVALUATE = "autograd::engine::evaluate_function: "  # the backward thread's op names start so


def _short(name: object) -> str:
    return str(name).removeprefix("aten::").removeprefix(EVALUATE)


def runs(codes: np.ndarray, max_period: int, min_reps: int) -> list[tuple[int, int, int]]:
    """(start, period, repeats) of the maximal stretches of `codes` that are one block repeated back
    to back ≥ `min_reps` times, the longest first (then the shortest period); a position belongs to one
    stretch at most (a head's three casts after three GEMMs are not heads: the whole head covers more)."""
    n = len(codes)
    found: list[tuple[int, int, int]] = []
    for p in range(1, min(max_period, n - 1) + 1):
        eq = np.concatenate([[False], codes[:-p] == codes[p:], [False]])
        edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
        for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            reps = (hi - lo + p) // p  # codes[lo:hi + p] has period p
            if reps >= min_reps:
                found.append((lo, p, reps))
    taken = np.zeros(n, dtype=bool)
    out: list[tuple[int, int, int]] = []
    for lo, p, reps in sorted(found, key=lambda x: (-x[1] * x[2], x[1], x[0])):
        if not taken[lo:lo + reps * p].any():
            taken[lo:lo + reps * p] = True
            out.append((lo, p, reps))
    return sorted(out)


def narrow(rank: RankTrace, block: list[int], gemm_ops: np.ndarray, k: int, *,
           min_projections: int = MIN_PROJECTIONS) -> bool:
    """The block has ≥ MIN_PROJECTIONS GEMM ops and every one reads one activation A (its first input) with a 2-D weight whose
    output width N satisfies N × k ≤ A's width, and no other op of the block reads A: the k blocks are
    slices of one projection. A layer stack fails: its block gives back its input's width (a GEMM with
    N = d, a residual add or norm on A), which the next layer reads."""
    gemms = [r for r in block if gemm_ops[r]]
    if len(gemms) < min_projections:
        return False
    act = input_dims(rank, gemms[0])
    if not act or len(act[0]) < 2:
        return False
    a = act[0]
    width = a[-1]
    for r in block:
        dims = input_dims(rank, r)
        if not gemm_ops[r]:
            if a in dims:
                return False
            continue
        weight = [d for d in dims[1:] if len(d) == 2]
        if not dims or dims[0] != a or not weight:
            return False
        w = weight[0]
        n = w[0] if w[1] == width else w[1] if w[0] == width else 0
        if n <= 0 or n * k > width:
            return False
    return True


def projection_blocks(rank: RankTrace, seq: np.ndarray, start: int, period: int, reps: int, gemm_ops: np.ndarray,
                      thread: int) -> list[tuple[int, np.ndarray, int]]:
    """The heads laid out projection by projection (every head's query, then every head's key, ...,
    each set stacked: the from-scratch tutorials' `torch.stack([h.query(x) for h in heads])`): a block
    of h ≥ MIN_HEADS narrow GEMMs on one activation (N × h ≤ its width) and ops that do not read it,
    repeated ≥ MIN_PROJECTIONS times back to back. One (thread, stretch, period 1) per projection: its
    h GEMMs are the h heads' slices of one projection."""
    # the block starts at its first GEMM (the first head's query)
    first = next((i for i in range(start, start + period) if gemm_ops[seq[i]]), None)
    if first is None:
        return []
    reps = (start + period * reps - first) // period
    if not MIN_PROJECTIONS <= reps <= MAX_PROJECTIONS:
        return []
    block = seq[first:first + period].tolist()
    h = 0
    while h < len(block) and gemm_ops[block[h]]:
        h += 1
    if h < MIN_HEADS or gemm_ops[block[h:]].any() or not narrow(rank, block, gemm_ops, h, min_projections=1):
        return []
    return [(thread, seq[first + b * period:first + b * period + h], 1) for b in range(reps)]


def _per_projection(k: int, heads: set[int]) -> int:
    """Heads laid out projection by projection: their backward runs every projection's heads in one
    stretch of P × h (or P × h − 1: the first one's input gradient is not accumulated) repetitions; h."""
    return next((h for h in sorted(heads) for p in range(MIN_PROJECTIONS, MAX_PROJECTIONS + 1)
                 if k in (p * h, p * h - 1)), 0)


def find_heads(rank: RankTrace, classes: np.ndarray, steps: StepsOf,
               skip: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per stretch of k ≥ MIN_HEADS per-head blocks (forward: narrow GEMMs on one activation,
    `narrow`) and per backward stretch of k − 1 or k repetitions with GEMMs and ≥ k AccumulateGrad
    calls on the backward thread (ENSEMBLE_COLUMNS; the first head's backward may differ: its input
    gradient is not accumulated); per rank.gpu row the head count of its stretch (0: none) and its µs
    (NaN outside), whether its kernel works on the heads' shared input (its op's first input has the
    activation's shape: the input's autocast cast, the sum of its k gradients; one stacked projection
    does that once, not k times), and per rank.runtime row whether a stretch's op made the call. Steps whose backward
    holds no such stretch (inference, shared weights) give nothing; GPU rows of `skip` keep a stretch out."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    heads_of = np.zeros(len(gpu), dtype=np.int64)
    if not len(ops) or not len(rt) or not len(gpu) or not has_accumulate_grad(rank):
        return (empty(), heads_of, np.full(len(gpu), np.nan), np.zeros(len(gpu), dtype=bool),
                np.zeros(len(rt), dtype=bool))
    rt_top, launches, gpu_top, gemms, depth0, names, ts, end, tid, grads, gpu_dur = top_level(rank, classes)
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    rows: list[dict[str, object]] = []
    calls = np.zeros(len(rt), dtype=bool)
    shared = np.zeros(len(gpu), dtype=bool)
    texts: dict[bytes, str] = {}
    for step in np.unique(steps.ops[depth0]).tolist():
        if step < 0:
            continue
        mine = depth0[steps.ops[depth0] == step]
        forward: list[tuple[int, np.ndarray, int]] = []  # (thread, stretch rows, period)
        by_projection: set[int] = set()  # head counts of heads laid out projection by projection
        backward: list[tuple[int, np.ndarray, int]] = []
        for thread in np.unique(tid[mine]).tolist():
            seq = mine[tid[mine] == thread]
            seq = seq[np.argsort(ts[seq], kind="stable")]
            sigs = block_signatures(rank, seq, names, launches, texts)
            codes = np.unique(np.asarray(sigs, dtype=object), return_inverse=True)[1].astype(np.int64)
            for start, period, reps in runs(codes, MAX_FORWARD_PERIOD, MIN_HEADS):
                # the block starts at its first GEMM (the first head's first projection)
                first = next((i for i in range(start, start + period) if gemms[seq[i]]), None)
                if first is None:
                    continue
                k = (start + period * reps - first) // period
                block = seq[first:first + period].tolist()
                if k >= MIN_HEADS and narrow(rank, block, gemms > 0, k):
                    forward.append((int(thread), seq[first:first + period * k], period))
            for start, period, reps in runs(codes, MAX_PROJECTION_PERIOD, MIN_PROJECTIONS):
                found = projection_blocks(rank, seq, start, period, reps, gemms > 0, int(thread))
                forward += found
                by_projection |= {len(s) for _, s, _ in found}
            # backward ops carry no shapes: by name only (a cast's launch count differs for the first head)
            bcodes = np.unique(names[seq].astype(str), return_inverse=True)[1].astype(np.int64)
            for start, period, reps in runs(bcodes, MAX_BACKWARD_PERIOD, MIN_HEADS - 1):
                stretch = seq[start:start + period * reps]
                if gemms[stretch].any() and all(str(names[r]).startswith(EVALUATE) for r in stretch.tolist()):
                    backward.append((int(thread), stretch, period))
        if not forward:
            continue
        counts = {len(s) // p for _, s, p in forward}
        picked = [(FORWARD, f) for f in forward]
        for thread, stretch, period in backward:
            k = len(stretch) // period
            heads = k if k in counts else k + 1 if k + 1 in counts else _per_projection(k, by_projection)
            lo, hi = ts[stretch].min(), end[stretch].max()
            accumulated = int(((tid[grads] == thread) & (ts[grads] >= lo) & (ts[grads] <= hi)).sum())
            if heads and accumulated >= heads:
                picked.append((BACKWARD, (thread, stretch, period)))
        if not any(d == BACKWARD for d, _ in picked):
            continue  # no weights of their own per head in a backward: not separate heads to stack
        hits = [np.isin(gpu_top, stretch) for _, (_, stretch, _) in picked]
        inputs = {input_dims(rank, int(s[0]))[0] for _, s, _ in forward}  # the activations the heads read
        if skip is not None and len(skip) == len(gpu) and any((h & skip).any() for h in hits):
            continue
        for (direction, (thread, stretch, period)), hit in zip(picked, hits, strict=True):
            k = len(stretch) // period
            heads = k if direction == FORWARD or k in counts else k + 1 if k + 1 in counts \
                else _per_projection(k, by_projection)
            heads_of[hit] = heads
            for i in np.flatnonzero(hit & (gpu_op >= 0)).tolist():
                dims = input_dims(rank, int(gpu_op[i]))
                shared[i] = bool(dims) and dims[0] in inputs
            calls |= np.isin(rt_top, stretch)
            one = stretch[:period]
            first = int(stretch[0])
            rows.append({EN_STEP: int(step), EN_THREAD: thread, EN_DIRECTION: direction, EN_MEMBERS: heads,
                         EN_OPS: " → ".join(_short(names[r]) for r in one.tolist())[:TEXT_CHARS],
                         EN_FIRST: f"{names[first]}{rank.op_inputs(first).get(tables.OP_INPUT_DIMS)}"[:TEXT_CHARS],
                         EN_LAUNCHES: int(launches[one].sum()), EN_GEMMS: int(gemms[stretch].sum()),
                         EN_HOST_US: float(end[stretch].max() - ts[stretch].min()),
                         EN_GPU_US: float(gpu_dur[hit].sum()), EN_KIND: KIND_HEADS})
    return (pd.DataFrame(rows, columns=list(ENSEMBLE_COLUMNS)), heads_of,
            np.where(heads_of > 0, gpu_dur, np.nan), shared & (classes != GEMM), calls)
