"""Model ensembles at inference, called member by member: a block of layers with GEMMs run k ≥ 8 times back to back on inputs of one shape, its k outputs joined by one stack or cat; one batched GEMM per layer over stacked weights would run each layer once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.ensembles import (
    ENSEMBLE_COLUMNS,
    FORWARD,
    MIN_MEMBERS,
    block_signatures,
    empty,
    has_accumulate_grad,
    independent,
    stretch_row,
    top_level,
)
from tracekit.analyzers.detectors.heads import runs
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.samples import JOINS
from tracekit.analyzers.detectors.toplevel import text_codes
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# Launching ops of one member's forward: an MLP of 5 Linear layers and 4 activations is 9 (held-out
# dynamics_ensemble_member_loop, H100: 8 members inside each of 25 rollout steps, a stack after them;
# one baddbmm per layer over stacked weights took the bare step from 28.7 to 7.6 ms), with room.
MAX_MEMBER_PERIOD = 32


def listed_inputs(rank: RankTrace, row: int) -> int:
    """How many tensors the first (TensorList) input of a join op lists; 0 when the profiler kept none."""
    dims = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    first = dims[0] if dims else None
    if not isinstance(first, list) or not first or not all(isinstance(d, list) for d in first):
        return 0
    return len(first)


def find_inference_ensembles(rank: RankTrace, classes: np.ndarray, steps: StepsOf, skip: np.ndarray | None = None
                             ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """On a rank with no backward (no AccumulateGrad), one forward row per stretch of k ≥ MIN_MEMBERS
    repetitions of one block (same ops, shapes and launches; ≤ MAX_MEMBER_PERIOD launching ops) with
    GEMMs, whose first op reads a shape no other op of the block reads (ensembles.independent: not a
    layer stack), followed by a join listing exactly k tensors (the members' outputs); as
    ensembles.find_ensembles, with the per-GPU-row member counts and durations and the member calls.
    GPU rows of `skip` (another pattern's) keep a stretch out."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    if not len(ops) or not len(rt) or not len(gpu) or has_accumulate_grad(rank):
        return empty(), np.zeros(len(gpu), dtype=np.int64), np.full(len(gpu), np.nan), np.zeros(len(rt), dtype=bool)
    top_level_of = top_level(rank, classes)
    rt_top, launches, gpu_top, gemms, depth0, names, ts, _, tid, _, gpu_dur = top_level_of
    rows: list[dict[str, object]] = []
    texts: dict[bytes, str] = {}
    joins = np.isin(names, list(JOINS))
    launched = gpu_top >= 0  # per op row: its GPU time, whether another pattern owns its work, its members
    op_gpu_us = np.bincount(gpu_top[launched], weights=gpu_dur[launched], minlength=len(ops))
    owned = np.zeros(len(ops), dtype=bool)
    if skip is not None and len(skip) == len(gpu):
        owned[gpu_top[launched & skip]] = True
    op_members = np.zeros(len(ops), dtype=np.int64)
    for step in np.unique(steps.ops[depth0]).tolist():
        if step < 0:
            continue
        mine = depth0[steps.ops[depth0] == step]
        for thread in np.unique(tid[mine]).tolist():
            seq = mine[tid[mine] == thread]
            seq = seq[np.argsort(ts[seq], kind="stable")]
            if not joins[seq].any() or not gemms[seq].any():
                continue
            codes = text_codes(block_signatures(rank, seq, names, launches, texts))
            for lo, period, k in runs(codes, MAX_MEMBER_PERIOD, MIN_MEMBERS):
                after = lo + period * k
                if after >= len(seq) or not joins[seq[after]] or listed_inputs(rank, int(seq[after])) != k:
                    continue
                stretch = seq[lo:after]
                if (not gemms[stretch].any() or owned[stretch].any()
                        or not independent(rank, stretch[:period].tolist())):
                    continue
                op_members[stretch] = k
                rows.append(stretch_row(rank, (int(step), int(thread), FORWARD, k), stretch, period, int(stretch[0]),
                                        float(op_gpu_us[stretch].sum()), top_level_of))
    members_of = np.where(launched, op_members[np.maximum(gpu_top, 0)], 0)
    calls = (rt_top >= 0) & (op_members[np.maximum(rt_top, 0)] > 0)
    return (pd.DataFrame(rows, columns=list(ENSEMBLE_COLUMNS)), members_of,
            np.where(members_of > 0, gpu_dur, np.nan), calls)
