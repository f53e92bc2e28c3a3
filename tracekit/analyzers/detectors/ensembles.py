"""Model ensembles called in a Python loop: the same block of layers (same ops, same shapes, GEMMs among them) run k times a step, each time with other weights on an input of one shape, forward and backward; one batched GEMM per layer over stacked weights would do each layer once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import dims_texts, repeated_block, text_codes, top_ops
from tracekit.analyzers.kernels import GEMM
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# Members per step: fewer is a short loop (the batching rules' threshold: samples.MIN_SAMPLES).
MIN_MEMBERS = 8
# Weights of their own per member: the backward stretch calls AccumulateGrad at least once per
# member. One module called k times accumulates its gradient once (autograd sums the k contributions
# before the AccumulateGrad node), so k repeats of the same weights (micro-batches, requests) count once.
ACCUMULATE_GRAD = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
FORWARD, BACKWARD = "forward", "backward"

# --- columns of Patterns.ensembles (one row per step × direction with an ensemble loop) -------------
EN_STEP = "step"
EN_THREAD = "thread"
EN_DIRECTION = "direction"  # FORWARD | BACKWARD
EN_MEMBERS = "members"  # repetitions of the block in the step
EN_OPS = "ops"  # one member's launching top-level ops, "a → b"
EN_FIRST = "first"  # the forward block's first op with its input shapes (the input every member reads)
EN_LAUNCHES = "launches"  # launch calls of one member
EN_GEMMS = "gemms"  # GEMM kernels of all members
EN_HOST_US = "host_us"  # the stretch's wall time on its thread (first member's start to last one's end)
EN_GPU_US = "gpu_us"  # GPU time of the members' activities
EN_KIND = "kind"  # KIND_ENSEMBLE | KIND_HEADS (detectors/heads.py: attention heads as separate modules)
KIND_ENSEMBLE, KIND_HEADS = "ensemble", "heads"
ENSEMBLE_COLUMNS = (EN_STEP, EN_THREAD, EN_DIRECTION, EN_MEMBERS, EN_OPS, EN_FIRST, EN_LAUNCHES, EN_GEMMS,
                    EN_HOST_US, EN_GPU_US, EN_KIND)
TEXT_CHARS = 120  # of EN_OPS / EN_FIRST (trace names and shapes are untrusted text: kept short)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(ENSEMBLE_COLUMNS))


def input_dims(rank: RankTrace, row: int) -> list[tuple[int, ...]]:
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return [tuple(d) for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]


def block_signatures(rank: RankTrace, seq: np.ndarray, names: np.ndarray, launches: np.ndarray,
                     texts: dict[bytes, str]) -> list[str]:
    """Per op row of `seq`, what a repeated member compares: its name, its input shapes and its launch
    count (`texts`: the shapes formatted so far, see toplevel.dims_texts)."""
    return [f"{names[r]}{d}#{launches[r]}" for r, d in zip(seq.tolist(), dims_texts(rank, seq, texts), strict=True)]


def independent(rank: RankTrace, block: list[int]) -> bool:
    """The block's first op reads a shape no other op of the block reads, in any order of its sizes: its
    output cannot be the next repetition's input (a layer stack's block reads and writes its input's
    shape: residual adds, norms; nn.MultiheadAttention reads the (S, B, E) transpose of the (B, S, E)
    activation its residual add reads: heldout7 lars_loop's 12-layer encoder), so the repetitions are
    separate calls on inputs of one shape."""
    first = input_dims(rank, block[0])
    if not first:
        return False
    size = sorted(first[0])
    return not any(size == sorted(d) for r in block[1:] for d in input_dims(rank, r))


def top_level(rank: RankTrace, classes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per runtime row its top-level op (-1: none); per op its launch calls and GEMM kernels; the
    launching top-level ops; op names, starts, ends, threads; the top-level AccumulateGrad ops; per
    GPU row its top-level op and its duration (rt_top, launches, gpu_top, gemms, depth0, names, ts, end,
    tid, grads, gpu_dur)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    top = top_ops(ops)
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    rt_top = np.where(rt_op >= 0, top[np.maximum(rt_op, 0)], -1)
    launching = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS) & (rt_top >= 0)
    launches = np.bincount(rt_top[launching], minlength=len(ops))
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_top = np.where(gpu_launch >= 0, rt_top[np.maximum(gpu_launch, 0)], -1)
    gemms = np.bincount(gpu_top[(gpu_top >= 0) & (classes == GEMM)], minlength=len(ops))
    depth = ops[tables.OP_DEPTH].to_numpy()
    depth0 = np.flatnonzero((depth == 0) & (launches > 0))
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, end, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    grads = np.flatnonzero((depth == 0) & (names == ACCUMULATE_GRAD))
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    return rt_top, launches, gpu_top, gemms, depth0, names, ts, end, tid, grads, gpu_dur


def stretch_row(rank: RankTrace, where: tuple[int, int, str, int], stretch: np.ndarray, period: int, first: int,
                gpu_us: float, top_level_of: tuple[np.ndarray, ...]) -> dict[str, object]:
    """One row of ENSEMBLE_COLUMNS: `where` = (step, thread, direction, members k) of a stretch of k
    blocks of `period` op rows, `first` the forward block's first op, `gpu_us` its GPU rows' time
    (top_level_of: top_level(rank, classes))."""
    _, launches, _, gemms, _, names, ts, end, _, _, _ = top_level_of
    step, thread, direction, k = where
    one = stretch[:period]
    return {EN_STEP: step, EN_THREAD: thread, EN_DIRECTION: direction, EN_MEMBERS: k,
            EN_OPS: " → ".join(str(names[r]).removeprefix("aten::") for r in one.tolist())[:TEXT_CHARS],
            EN_FIRST: f"{names[first]}{rank.op_inputs(first).get(tables.OP_INPUT_DIMS)}"[:TEXT_CHARS],
            EN_LAUNCHES: int(launches[one].sum()), EN_GEMMS: int(gemms[stretch].sum()),
            EN_HOST_US: float(end[stretch].max() - ts[stretch].min()),
            EN_GPU_US: gpu_us, EN_KIND: KIND_ENSEMBLE}


def has_accumulate_grad(rank: RankTrace) -> bool:
    """Whether any op of the rank is the autograd engine's AccumulateGrad node (a backward with weights
    of their own: what the ensemble and per-head detectors need; inference traces have none)."""
    names = rank.ops[tables.OP_NAME]
    return bool(len(names)) and bool((names.to_numpy(dtype=object) == ACCUMULATE_GRAD).any())


def find_ensembles(rank: RankTrace, classes: np.ndarray, steps: StepsOf,
                   skip: np.ndarray | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """One row per step and direction whose forward repeats one independent block with GEMMs k ≥
    MIN_MEMBERS times (ENSEMBLE_COLUMNS) and whose backward thread repeats a block k times with at
    least k AccumulateGrad calls; per rank.gpu row the member count of the stretch that launched it
    (0: none) and its duration (µs, NaN outside), and per rank.runtime row whether a member's op made
    the call (launches and runtime queries). GPU rows of `skip` (another pattern's: batch-1 requests) keep a stretch out."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    members_of = np.zeros(len(gpu), dtype=np.int64)
    if not len(ops) or not len(rt) or not len(gpu) or not has_accumulate_grad(rank):
        return empty(), members_of, np.full(len(gpu), np.nan), np.zeros(len(rt), dtype=bool)
    top_level_of = top_level(rank, classes)
    rt_top, launches, gpu_top, gemms, depth0, names, ts, end, tid, grads, gpu_dur = top_level_of
    rows: list[dict[str, object]] = []
    calls = np.zeros(len(rt), dtype=bool)
    texts: dict[bytes, str] = {}
    for step in np.unique(steps.ops[depth0]).tolist():
        if step < 0:
            continue
        mine = depth0[steps.ops[depth0] == step]
        found: dict[str, tuple[int, np.ndarray, int]] = {}  # direction -> (thread, stretch rows, period)
        for thread in np.unique(tid[mine]).tolist():
            seq = mine[tid[mine] == thread]
            seq = seq[np.argsort(ts[seq], kind="stable")]
            # the launch count tells apart calls the backward records without shapes (AddmmBackward0 of
            # the first layer launches fewer kernels than of a hidden one: no input gradient)
            sigs = block_signatures(rank, seq, names, launches, texts)
            block = repeated_block(text_codes(sigs), MIN_MEMBERS)
            if block is None:
                continue
            start, period, k = block
            stretch = seq[start:start + period * k]
            if not gemms[stretch].any():
                continue
            if independent(rank, seq[start:start + period].tolist()):
                found.setdefault(FORWARD, (thread, stretch, period))
            else:
                found.setdefault(BACKWARD + str(k), (thread, stretch, period))
        if FORWARD not in found:
            continue
        k = len(found[FORWARD][1]) // found[FORWARD][2]
        back = found.get(BACKWARD + str(k))
        if back is None:
            continue
        b_thread, b_rows, _ = back
        lo, hi = ts[b_rows].min(), end[b_rows].max()
        accumulated = int(((tid[grads] == b_thread) & (ts[grads] >= lo) & (ts[grads] <= hi)).sum())
        if accumulated < k:
            continue  # the same weights k times: one gradient accumulation each, not an ensemble
        picked = [(FORWARD, found[FORWARD]), (BACKWARD, back)]
        hits = [np.isin(gpu_top, stretch) for _, (_, stretch, _) in picked]
        if skip is not None and len(skip) == len(gpu) and any((h & skip).any() for h in hits):
            continue
        first = found[FORWARD][1][0]
        calls |= np.isin(rt_top, np.concatenate([stretch for _, (_, stretch, _) in picked]))
        for (direction, (thread, stretch, period)), hit in zip(picked, hits, strict=True):
            members_of[hit] = k
            rows.append(stretch_row(rank, (int(step), int(thread), direction, k), stretch, period, int(first),
                                    float(gpu_dur[hit].sum()), top_level_of))
    return (pd.DataFrame(rows, columns=list(ENSEMBLE_COLUMNS)), members_of,
            np.where(members_of > 0, gpu_dur, np.nan), calls)
