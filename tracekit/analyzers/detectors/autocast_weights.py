"""float32 weights cast to bf16/fp16 by autocast inside every GEMM call: an inference model kept in float32 and run under `torch.autocast`, whose cast cache lives only as long as the autocast region, so every forward (every generated token) casts every weight again.

Under autocast, `aten::linear` (`matmul`, `mm`, `addmm`, `bmm`) records its input casts as children:
an `aten::to` / `aten::_to_copy` of the float32 weight operand (the GEMM's own inputs show the weight as
`float` and the dims of the cast's input) to dtype 15 (bfloat16) or 5 (float16). The cast reads the
float32 weight and writes the half-precision copy the GEMM then reads: 1.5× the GEMM's own weight
bytes again, every call (held-out autocast_decode, H100: a 939M-weight decoder, 48.6 ms a step of 16
tokens; cast once with `model.to(torch.bfloat16)`, 22.4 ms). In training the float32 master weights
change every step, so the cast is the price of mixed precision: the rule (convert_weights_once) is
silent there. Rows in weight_convert.CONVERT_COLUMNS, one per step × (GEMM op, weight shape)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.gqa_expand import dims_of
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.layers import under
from tracekit.analyzers.detectors.weight_convert import (
    CONVERT_COLUMNS,
    WC_CALLS,
    WC_CONSUMER,
    WC_GEMM_US,
    WC_KERNELS,
    WC_LAUNCHES,
    WC_OPS,
    WC_OUTPUT_SCALE,
    WC_SOURCE,
    WC_STEP,
    WC_TIME_US,
    WC_TO,
    WC_WEIGHT,
    WC_WEIGHT_BYTES,
    WeightConverts,
    empty,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# GEMM ops autocast casts the inputs of, and their weight operand's position
AUTOCAST_GEMMS = {"aten::linear": 1, "aten::matmul": 1, "aten::mm": 1, "aten::addmm": 2, "aten::bmm": 1}
CASTS = frozenset({"aten::to", "aten::_to_copy"})
HALF_CODES = {"15": "c10::BFloat16", "5": "c10::Half"}  # ScalarType codes of the cast's dtype argument
FLOAT32 = "float"


def _cast_of(rank: RankTrace, gemm: int, child: int, name: str) -> tuple[tuple[int, ...], str] | None:
    """(weight dims, target dtype) when op `child` casts op `gemm`'s float32 weight operand to bf16/fp16."""
    at = AUTOCAST_GEMMS[name]
    g = rank.op_inputs(gemm)
    dims, types = g.get(tables.OP_INPUT_DIMS) or [], g.get(tables.OP_INPUT_TYPES) or []
    if len(dims) <= at or len(types) <= at or types[at] != FLOAT32:
        return None
    weight = dims_of(dims[at])
    c = rank.op_inputs(child)
    cdims, ctypes, concrete = (c.get(tables.OP_INPUT_DIMS) or [], c.get(tables.OP_INPUT_TYPES) or [],
                               c.get(tables.OP_CONCRETE_INPUTS) or [])
    if weight is None or len(weight) != 2 or not cdims or dims_of(cdims[0]) != weight or not ctypes or ctypes[0] != FLOAT32:
        return None
    to = HALF_CODES.get(str(concrete[1]).strip()) if len(concrete) > 1 else None
    return (weight, to) if to is not None else None


def find_autocast_weights(rank: RankTrace, steps: StepsOf, rows: np.ndarray | None = None) -> WeightConverts:
    """CONVERT_COLUMNS rows for the float32 weights autocast casts inside GEMM calls, and the masks
    (the casts' kernels, the GEMMs' kernels, the casts' runtime calls)."""
    ops, gpu, rt = rank.ops, rank.gpu, rank.runtime
    none = WeightConverts(empty(), np.zeros(len(gpu), dtype=bool), np.zeros(len(gpu), dtype=bool),
                          np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(gpu):
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    parent = ops[tables.OP_PARENT].to_numpy(dtype=np.int64)
    candidates = np.flatnonzero(np.isin(names, list(CASTS)) & (parent >= 0))
    if not len(candidates):
        return none
    candidates = candidates[np.isin(names[parent[candidates]], list(AUTOCAST_GEMMS))]
    cast = np.zeros(len(ops), dtype=bool)
    consumer = np.zeros(len(ops), dtype=bool)
    found: dict[int, tuple[int, tuple[int, ...], str]] = {}  # cast op -> (GEMM op, weight, dtype)
    for child in candidates.tolist():
        gemm = int(parent[child])
        got = _cast_of(rank, gemm, child, str(names[gemm]))
        if got is not None:
            cast[child] = consumer[gemm] = True
            found[child] = (gemm, *got)
    if not found:
        return none
    op_of_gpu = gpu[tables.GPU_OP].to_numpy(dtype=np.int64)
    cast_op = under(ops, cast, depth=4)
    gemm_op = under(ops, consumer, depth=6)
    linked = op_of_gpu >= 0
    in_cast = np.zeros(len(gpu), dtype=bool)
    in_cast[linked] = cast_op[op_of_gpu[linked]] >= 0
    in_gemm = np.zeros(len(gpu), dtype=bool)
    in_gemm[linked] = (gemm_op[op_of_gpu[linked]] >= 0) & ~in_cast[linked]
    if rows is not None:
        in_cast &= rows
        in_gemm &= rows
    rt_op = rt[tables.RT_OP].to_numpy(dtype=np.int64) if len(rt) else np.zeros(0, dtype=np.int64)
    calls = np.zeros(len(rt), dtype=bool)
    calls[rt_op >= 0] = cast_op[rt_op[rt_op >= 0]] >= 0
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS) if len(rt) else calls
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    n = len(ops)
    cast_of_kernel = cast_op[op_of_gpu[linked & in_cast]]
    cast_us = np.bincount(cast_of_kernel, weights=dur[linked & in_cast], minlength=n)
    cast_kernels = np.bincount(cast_of_kernel, minlength=n)
    gemm_us = np.bincount(gemm_op[op_of_gpu[linked & in_gemm]], weights=dur[linked & in_gemm], minlength=n)
    launched = calls & is_launch
    cast_launches = np.bincount(cast_op[rt_op[launched]], minlength=n) if launched.any() else np.zeros(n, dtype=np.int64)
    groups: dict[tuple[int, str, tuple[int, ...], str], dict[str, object]] = {}
    for child, (gemm, weight, to) in found.items():
        step = int(steps.ops[child])
        key = (step, str(names[gemm]), weight, to)
        g = groups.setdefault(key, {WC_STEP: step, WC_CONSUMER: str(names[gemm]), WC_WEIGHT: str(list(weight)),
                                    WC_SOURCE: f"{list(weight)} {FLOAT32}", WC_TO: to, WC_OPS: "autocast: to",
                                    WC_CALLS: 0, WC_LAUNCHES: 0, WC_KERNELS: 0, WC_TIME_US: 0.0, WC_GEMM_US: 0.0,
                                    WC_OUTPUT_SCALE: 0, WC_WEIGHT_BYTES: 2.0 * math.prod(weight)})
        g[WC_CALLS] = int(str(g[WC_CALLS])) + 1
        g[WC_LAUNCHES] = int(str(g[WC_LAUNCHES])) + int(cast_launches[child])
        g[WC_KERNELS] = int(str(g[WC_KERNELS])) + int(cast_kernels[child])
        g[WC_TIME_US] = float(str(g[WC_TIME_US])) + float(cast_us[child])
        g[WC_GEMM_US] = float(str(g[WC_GEMM_US])) + float(gemm_us[gemm])
    table = pd.DataFrame(list(groups.values()), columns=list(CONVERT_COLUMNS))
    return WeightConverts(table, in_cast, in_gemm, calls)
