"""Gradient accumulation: a training step that runs the same forward (same ops, same input shapes) k ≥ 2 times on its launching thread, each followed by its own backward pass, before one optimizer step; one forward+backward at k× the micro-batch would do the same work."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import DTYPES
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import dims_texts, repeated_block, text_codes, top_ops
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.grouping import rows_by_key
from tracekit.trace.model import RankTrace

MIN_MICRO_BATCHES = 2  # forward+backward passes per optimizer step: fewer is no accumulation


# A backward pass as torch.autograd records it: one evaluate_function range per graph node, on the
# autograd engine's device thread (CUDA) or on the calling thread (CPU).
BACKWARD = re.compile(r"^autograd::engine::evaluate_function")

# --- columns of Patterns.accumulation (one row per step that accumulates gradients) ----------------
AC_STEP = "step"
AC_THREAD = "thread"
AC_MICRO_BATCHES = "micro_batches"  # forward+backward passes before the optimizer step
AC_OPS = "ops"  # top-level ops of one forward that launch work, in words
AC_FIRST = "first"  # the forward's first op with its input shapes, in words
AC_LAUNCHES = "launches"  # launch calls of one forward+backward (the mean over the passes)
AC_GPU_US = "gpu_us"  # GPU time of all the passes' activities
AC_INPUT_BYTES = "input_bytes"  # bytes of the first inputs of one forward's launching ops (NaN unknown)
AC_PER_SAMPLE = "per_sample"  # each pass takes the norm of its gradients: per-sample clipping (PER_SAMPLE_OPS)
ACCUMULATION_COLUMNS = (AC_STEP, AC_THREAD, AC_MICRO_BATCHES, AC_OPS, AC_FIRST, AC_LAUNCHES, AC_GPU_US,
                        AC_INPUT_BYTES, AC_PER_SAMPLE)
# A pass that takes vector norms on its launching thread after its loss reads its own gradients: DP-SGD's
# per-sample clipping (norm of each sample's gradient, clip factor, scaled sum; heldout7 dp_per_sample, a
# batch-1 forward + torch.autograd.grad per sample). Those gradients must stay apart, so the passes cannot
# become one larger micro-batch; torch.func.vmap(torch.func.grad(...)) computes them in one batched pass.
PER_SAMPLE_OPS = frozenset({"aten::linalg_vector_norm", "aten::norm", "aten::_foreach_norm"})
TEXT_CHARS = 120  # of AC_OPS and AC_FIRST (trace names and shapes are untrusted text: kept short)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(ACCUMULATION_COLUMNS))


def _first_input_bytes(rank: RankTrace, row: int) -> float:
    """Bytes of op `row`'s first tensor input (its dims × its dtype's size); NaN when not recorded."""
    inputs = rank.op_inputs(row)
    dims, types = inputs.get(tables.OP_INPUT_DIMS) or [], inputs.get(tables.OP_INPUT_TYPES) or []
    if not dims or not types or not isinstance(dims[0], list) or not dims[0]:
        return math.nan
    size = DTYPES.get(str(types[0]), (None, None))[1]
    if size is None or not all(isinstance(d, int) and d >= 0 for d in dims[0]):
        return math.nan
    return float(math.prod(dims[0]) * size)


def _known_sum(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return float(sum(known)) if known else math.nan


def find_accumulation(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per step whose launching thread repeats one forward k ≥ MIN_MICRO_BATCHES times with a
    backward pass after each repetition (ACCUMULATION_COLUMNS), and per rank.gpu row whether one of
    those forward or backward passes launched it (the optimizer step after them is left out)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    in_passes = np.zeros(len(gpu), dtype=bool)
    if not len(ops) or not len(rt) or not len(gpu) or not matches(ops[tables.OP_NAME].to_numpy(dtype=object), BACKWARD).any():
        return empty(), in_passes  # no backward pass: no accumulation
    top = top_ops(ops)
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64)
    rt_top = np.where(rt_op >= 0, top[np.maximum(rt_op, 0)], -1)
    working = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS) & (rt_top >= 0)
    launches = np.bincount(rt_top[working], minlength=len(ops))
    depth0 = (ops[tables.OP_DEPTH].to_numpy() == 0) & (launches > 0)
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    backward = depth0 & matches(names, BACKWARD)
    forward = np.flatnonzero(depth0 & ~backward)
    ts, tid = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_TID].to_numpy()
    gpu_launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    gpu_top = np.where(gpu_launch >= 0, rt_top[np.maximum(gpu_launch, 0)], -1)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    rows: list[dict[str, Any]] = []
    texts: dict[bytes, str] = {}  # an op as a repeated block compares it: its name and its input shapes
    backward_of = rows_by_key(np.flatnonzero(backward), steps.ops)
    owner = np.full(len(ops), -1, dtype=np.int64)  # per op: the row of `rows` whose passes hold it
    for step, mine in rows_by_key(forward, steps.ops).items():
        if step < 0:
            continue
        thread = Counter(tid[mine].tolist()).most_common(1)[0][0]
        seq = mine[tid[mine] == thread]
        seq = seq[np.argsort(ts[seq], kind="stable")]
        sigs = [f"{names[r]}{d}" for r, d in zip(seq.tolist(), dims_texts(rank, seq, texts), strict=True)]
        found = repeated_block(text_codes(sigs), MIN_MICRO_BATCHES)
        if found is None:
            continue
        start, period, repeats = found
        # each repetition's window: from its first op to the next repetition's (the last: to the next op
        # of the thread after the block, the optimizer step, or the step's end)
        starts = ts[seq[start:start + period * repeats:period]]
        after = seq[start + period * repeats:]
        end = float(ts[after[0]]) if len(after) else math.inf
        bounds = np.append(starts, end)
        mine_bw = backward_of.get(step, forward[:0])
        windows = np.searchsorted(bounds, ts[mine_bw], side="right") - 1
        inside = (windows >= 0) & (windows < repeats)
        if len(np.unique(windows[inside])) < repeats:
            continue  # a repetition without its own backward: a layer stack or a request loop, not accumulation
        covered = np.concatenate([seq[start:start + period * repeats], mine_bw[inside]])
        owner[covered] = len(rows)
        one = seq[start:start + period]
        rows.append({AC_STEP: int(step), AC_THREAD: int(thread), AC_MICRO_BATCHES: repeats,
                     AC_OPS: " → ".join(str(names[r]).removeprefix("aten::") for r in one.tolist())[:TEXT_CHARS],
                     AC_FIRST: sigs[start][:TEXT_CHARS],
                     AC_LAUNCHES: round(float(launches[covered].sum()) / repeats),
                     AC_GPU_US: 0.0,  # below, over all steps at once
                     AC_INPUT_BYTES: _known_sum([_first_input_bytes(rank, int(r)) for r in one.tolist()]),
                     AC_PER_SAMPLE: any(str(names[r]) in PER_SAMPLE_OPS for r in one.tolist())})
    gpu_owner = np.where(gpu_top >= 0, owner[np.maximum(gpu_top, 0)], -1)
    in_passes = gpu_owner >= 0
    for row, hit in rows_by_key(np.flatnonzero(in_passes), gpu_owner).items():
        rows[row][AC_GPU_US] = float(gpu_dur[hit].sum())
    return pd.DataFrame(rows, columns=list(ACCUMULATION_COLUMNS)), in_passes

