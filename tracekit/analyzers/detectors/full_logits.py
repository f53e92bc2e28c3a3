"""Prefill logits of every position when only the last is read: a vocabulary projection over [B, S, hidden] whose [B, S, V] output (often upcast to float32 whole) is then indexed at the last position (`logits[:, -1]`), where projecting `h[:, -1:]` alone (`logits_to_keep=1`) computes 1/S of it.

Found per step: an `aten::select` of a 3-D [B, S, V] tensor along dim 1 at index -1 (or S - 1), or an
`aten::slice` along dim 1 from -1 (or S - 1), with S > 1 and V ≥ MIN_VOCAB (a vocabulary, not a
hidden size). Its logits kernels are the GPU work of the step's ops (each with the kernels of the
ops under it) that produce or transform the whole [B, S, V] tensor: a GEMM whose output is [B·S, V]
(`mm`/`addmm` of [B·S, K] × [K, V], `linear`/`matmul` of [B, S, K] with a [V, K] weight) and ops
whose first input is [B, S, V] or [B·S, V] (`to`/`copy_`, `softmax`, `div`, ...) other than the
indexing itself. One row per step × (B, S, V); per rank.gpu row, whether it is such a kernel."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.gqa_expand import concrete_arg, dims_of
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_VOCAB = 16_384  # the last dim of a logits tensor: vocabularies are 32k–256k; hidden sizes stay below
INDEX_OPS = ("aten::select", "aten::slice")
GEMM_OUT_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul")

# --- columns of Patterns.full_logits (one row per step × (B, S, V)) -------------------------------
FL_STEP = "step"
FL_SHAPE = "shape"  # "[8, 2048, 151936]"
FL_POSITIONS = "positions"  # S
FL_KERNELS = "kernels"
FL_GEMM_US = "gemm_us"  # the projection's kernels
FL_OTHER_US = "other_us"  # the kernels of the ops on the whole logits (casts, softmax, ...)
FULL_LOGITS_COLUMNS = (FL_STEP, FL_SHAPE, FL_POSITIONS, FL_KERNELS, FL_GEMM_US, FL_OTHER_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FULL_LOGITS_COLUMNS))


@dataclass(frozen=True)
class FullLogits:
    table: pd.DataFrame
    rows: np.ndarray  # per rank.gpu row: a kernel over the whole logits
    positions: np.ndarray  # per rank.gpu row: S of its logits (1 elsewhere)




def _last_position(shape: tuple[int, ...], concrete: object) -> bool:
    """select(x, 1, -1) or slice(x, 1, -1, ...): dim 1 at its last position (both name dim then index/start)."""
    s = shape[1]
    if concrete_arg(concrete, 1) not in ("1", "-2"):
        return False
    at = concrete_arg(concrete, 2)
    return at in ("-1", str(s - 1))


def _key_of(name: str, dims: list[object], keys: set[tuple[int, int, int]]) -> tuple[int, int, int] | None:
    """The (B, S, V) of `keys` whose full logits this op produces or reads, None when none."""
    shapes = [dims_of(d) for d in dims]
    first = shapes[0] if shapes else None
    for b, s, v in keys:
        if first in ((b, s, v), (b * s, v)):
            return b, s, v
        if name in GEMM_OUT_OPS and len(shapes) >= 2:
            a, w = shapes[-2] if name == "aten::addmm" and len(shapes) >= 3 else shapes[0], shapes[-1]
            if a is None or w is None:
                continue
            rows_ok = a[:-1] in ((b * s,), (b, s))
            if rows_ok and ((w[-1] == v and w[0] == a[-1]) or (w[0] == v and w[-1] == a[-1])):
                return b, s, v
    return None


def find_full_logits(rank: RankTrace, steps_of_ops: np.ndarray, rows: np.ndarray | None = None) -> FullLogits:
    """The logits computed for every position and read at the last (module docstring), over the selected GPU rows."""
    ops, gpu = rank.ops, rank.gpu
    none = FullLogits(empty(), np.zeros(len(gpu), dtype=bool), np.ones(len(gpu)))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    keys_by_step: dict[int, set[tuple[int, int, int]]] = {}
    for r in np.flatnonzero(np.isin(names, INDEX_OPS)).tolist():
        inputs = rank.op_inputs(r)
        dims = inputs.get(tables.OP_INPUT_DIMS) or []
        shape = dims_of(dims[0]) if dims else None
        if shape is None or len(shape) != 3 or shape[1] < 2 or shape[2] < MIN_VOCAB:
            continue
        if _last_position(shape, inputs.get(tables.OP_CONCRETE_INPUTS)):
            keys_by_step.setdefault(int(steps_of_ops[r]), set()).add((shape[0], shape[1], shape[2]))
    if not keys_by_step:
        return none
    gpu_op = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    linked = gpu_op >= 0 if rows is None else (gpu_op >= 0) & rows
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    mine = np.zeros(len(gpu), dtype=bool)
    positions = np.ones(len(gpu))
    found: dict[tuple[int, tuple[int, int, int]], list[float]] = {}
    memo: dict[int, tuple[tuple[int, int, int] | None, bool]] = {}
    for i in np.flatnonzero(linked).tolist():
        op = int(gpu_op[i])
        keys = keys_by_step.get(int(steps_of_ops[op]))
        if not keys:
            continue
        hit: tuple[tuple[int, int, int] | None, bool] = (None, False)
        node, depth = op, 0
        while node >= 0 and depth < 8:  # the op or an ancestor over the whole logits
            if node not in memo:
                name = str(names[node])
                key = None if name in INDEX_OPS else _key_of(name, rank.op_inputs(node).get(tables.OP_INPUT_DIMS) or [], keys)
                memo[node] = (key, name in GEMM_OUT_OPS)
            if memo[node][0] is not None:
                hit = memo[node]
                break
            node, depth = int(parent[node]), depth + 1
        key, gemm = hit
        if key is None:
            continue
        mine[i] = True
        positions[i] = key[1]
        acc = found.setdefault((int(steps_of_ops[op]), key), [0, 0.0, 0.0])
        acc[0] += 1
        acc[1 if gemm else 2] += float(dur[i])
    recs = [{FL_STEP: step, FL_SHAPE: f"[{b}, {s}, {v}]", FL_POSITIONS: s, FL_KERNELS: int(n), FL_GEMM_US: g,
             FL_OTHER_US: o} for (step, (b, s, v)), (n, g, o) in sorted(found.items()) if g > 0]
    if not recs:
        return none
    return FullLogits(pd.DataFrame(recs, columns=list(FULL_LOGITS_COLUMNS)), mine, positions)
