"""Static weights converted on every call: a GEMM's weight operand quantised to float8 or int8 or dequantised from int8 by a chain of aten ops right before the GEMM, every call, from a tensor nothing else in the step touches.

`Fp8Linear.forward` computing `w.abs().amax() / 448`, `w / scale` and `.to(float8_e4m3fn)` before
`torch._scaled_mm`, or an eager weight-only int8 linear `F.linear(x, w_int8.to(bf16)) * scale`, redo
the same conversion of the same weight on every call: kernels that read (and write) the whole weight,
and their launches, where converting once at load time leaves only the GEMM. Found per thread of a
step, over the top-level ops that launch work in time order:

- an anchor: an op that casts a 2-D tensor to a float8 dtype or int8 (a W8A8 layer quantizing its
  weight per call for `torch._int_mm`, held-out int8_ranker_requantize_weights), or from int8 / uint8 /
  float8 to a floating one (its `aten::copy_`'s destination and source types; a float8 checkpoint served through
  `w.to(bf16) * scale` and a bf16 GEMM, held-out fp8_fake_quant), or fake-quantizes a 2-D float tensor
  (`fake_quantize_per_{channel,tensor}_affine`: a QAT layer served unconverted, `to` FAKE_QUANT);
- its consumer: the first GEMM op (`linear`, `mm`, `matmul`, `addmm`, `_scaled_mm`) within MAX_AHEAD
  launching ops after it whose weight operand (linear's second input, the others' B) has the anchor's
  shape (or its transpose) and its destination dtype: the other operand is the activation;
- the chain: the ops between the GEMM before the consumer and the consumer whose tensor inputs are
  weight-shaped (at least one) or small (a scalar scale, a per-row or per-column scale vector), named
  as conversions are (CHAIN_OPS), and the small-input ops between the first and last of them (the
  scale's own arithmetic: `amax(|w|).float() / 448` clamped and cast). The activation's own
  quantisation has the activation's shape: it stays;
- for an int8 weight whose scale is not applied to the weight, the per-output-channel `mul` right
  after the GEMM (the dequantisation's scale on the output: gone once the scale is folded in).

A group (consumer op, weight shape, source shape and dtype, converted dtype) is kept when its source
(the first chain op's weight-shaped input) is read by no other launching op of the headline steps: a
parameter, not an activation or anything the step computes. One row per step × group; per rank.gpu
row, whether a chain (or output-scale) op launched it, and whether it is a consumer GEMM's kernel; per
rank.runtime row, whether a chain op issued it (the calls the rule's what-if removes)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import StepOps, TopLevel
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# The weight operand's position per GEMM op (linear: weight; mm/matmul/_scaled_mm: B; addmm: mat2)
# (and an embedding lookup's table: F.embedding(ids, table_int8.to(bf16) * scale[:, None]) converts the
# whole table to read a few rows of it)
WEIGHT_ARG = {"aten::linear": 1, "aten::mm": 1, "aten::matmul": 1, "aten::_scaled_mm": 1, "aten::addmm": 2,
              "aten::_int_mm": 1, "aten::embedding": 0}
GEMM_OPS = re.compile(r"^aten::(linear|mm|matmul|addmm|_scaled_mm|bmm|baddbmm|addmv|mv|_int_mm|embedding)$")
CHAIN_OPS = re.compile(r"^aten::(abs|abs_|amax|amin|aminmax|max|min|div|div_|mul|mul_|reciprocal|clamp|clamp_|"
                       r"clamp_min|clamp_max|round|round_|sub|sub_|neg|to|_to_copy|copy_|float|half|bfloat16|"
                       r"type_as|contiguous|clone|fill_|maximum|minimum|where|"
                       r"_?fake_quantize_(learnable_)?per_(channel|tensor)_affine)$")
# A quantization-aware-trained layer served unconverted: its float weight fake-quantized (rounded to the
# int8 grid and back, still float) before a float GEMM every call (torch.ao.quantization's FakeQuantize,
# held-out mixer_fake_quant_serving); the anchor is that op, `to` the FAKE_QUANT label
FAKE_QUANT_OP = re.compile(r"^aten::_?fake_quantize_(learnable_)?per_(channel|tensor)_affine$")
FAKE_QUANT = "int8 (fake-quantized)"
COPY = "aten::copy_"
INT8 = frozenset({"signed char", "unsigned char"})
FLOATING = frozenset({"float", "double", "c10::Half", "c10::BFloat16"})
MAX_AHEAD = 32  # launching ops between an anchor and its GEMM at most (a layer's conversions done up front)
OUTPUT_SCALE = re.compile(r"^aten::mul_?$")

# --- columns of Patterns.weight_converts (one row per step × group) --------------------------------
WC_STEP = "step"
WC_CONSUMER = "consumer"  # the GEMM op reading the converted weight
WC_WEIGHT = "weight"  # its shape as the GEMM reads it: "[4096, 14336]"
WC_SOURCE = "source"  # the converted tensor's shape and dtype: "[14336, 4096] c10::BFloat16"
WC_TO = "to"  # the dtype the chain converts to
WC_OPS = "ops"  # the chain's launching ops, in order, joined by " → "
WC_CALLS = "calls"  # GEMM calls whose weight was converted in the step
WC_LAUNCHES = "launches"  # launch calls of the chains (and output scales)
WC_KERNELS = "kernels"  # GPU activities they launched
WC_TIME_US = "time_us"  # their summed time
WC_GEMM_US = "gemm_us"  # the consumer GEMMs' kernel time (stays)
WC_OUTPUT_SCALE = "output_scales"  # per-channel scale muls after the GEMM counted in the chain
WC_WEIGHT_BYTES = "weight_bytes"  # bytes of one converted weight as the GEMM reads it
CONVERT_COLUMNS = (WC_STEP, WC_CONSUMER, WC_WEIGHT, WC_SOURCE, WC_TO, WC_OPS, WC_CALLS, WC_LAUNCHES, WC_KERNELS,
                   WC_TIME_US, WC_GEMM_US, WC_OUTPUT_SCALE, WC_WEIGHT_BYTES)
ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "signed char": 1, "unsigned char": 1}


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CONVERT_COLUMNS))


@dataclass(frozen=True)
class WeightConverts:
    """The detector's result: CONVERT_COLUMNS rows and the masks the rule's what-if reads."""

    table: pd.DataFrame = field(default_factory=empty)
    in_convert: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.gpu row
    consumers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.gpu row
    calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row


def _dims(v: object) -> tuple[int, ...] | None:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    return None


def _itemsize(dtype: str, source: str = "") -> int:
    if dtype == FAKE_QUANT:  # the GEMM reads the fake-quantized weight in its float dtype
        return ITEMSIZE.get(source, 4)
    return 1 if "Float8" in dtype else ITEMSIZE.get(dtype, 2)


@dataclass
class _Chain:
    consumer: int
    weight: tuple[int, ...]
    source: tuple[tuple[int, ...], str]
    to: str
    ops: list[int]
    scale: int  # the output-scale mul's row, -1 none


class _Inputs:
    """Decoded input dims and types of op rows, cached."""

    def __init__(self, rank: RankTrace) -> None:
        self.rank = rank
        self.cache: dict[int, tuple[list[object], list[object]]] = {}

    def __call__(self, row: int) -> tuple[list[object], list[object]]:
        got = self.cache.get(row)
        if got is None:
            inp = self.rank.op_inputs(row)
            dims, types = inp.get(tables.OP_INPUT_DIMS), inp.get(tables.OP_INPUT_TYPES)
            got = self.cache[row] = (dims if isinstance(dims, list) else [], types if isinstance(types, list) else [])
        return got


def _anchors(rank: RankTrace, top: np.ndarray, inputs: _Inputs) -> dict[int, tuple[tuple[int, ...], str, str]]:
    """Per top-level op row that casts a 2-D tensor to float8 or int8 or from int8 / float8 to a float: (its shape, the
    source dtype, the destination dtype), from the `aten::copy_` under it (or itself)."""
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    out: dict[int, tuple[tuple[int, ...], str, str]] = {}
    copies = np.flatnonzero(names == COPY)
    for row, types in zip(copies.tolist(), rank.input_values(copies, tables.OP_INPUT_TYPES), strict=True):
        if not isinstance(types, list) or len(types) < 2:
            continue
        dst, src = str(types[0]), str(types[1])
        if not ((("Float8" in dst or dst in INT8) and src in FLOATING)
                or ((src in INT8 or "Float8" in src) and dst in FLOATING)):
            continue
        dims = inputs(row)[0]
        if len(dims) < 2:
            continue
        shape = _dims(dims[1])
        if shape is not None and len(shape) == 2 and _dims(dims[0]) == shape:
            out.setdefault(int(top[row]), (shape, src, dst))
    for row in np.flatnonzero(matches(names, FAKE_QUANT_OP)).tolist():
        dims, types = inputs(row)
        shape = _dims(dims[0]) if dims else None
        src = str(types[0]) if types else ""
        if shape is not None and len(shape) == 2 and src in FLOATING:
            out.setdefault(int(top[row]), (shape, src, src))
    return out


def _role(dims: list[object], weight: tuple[int, ...]) -> str:
    """'weight' when a tensor input has the weight's shape (or its transpose) and the others are small
    (scalars, per-row or per-column scale vectors), 'small' when all are small, else 'other'."""
    n, k = weight
    shapes = {weight, (k, n)}
    small = {(n,), (k,), (n, 1), (1, k), (k, 1), (1, n)}
    seen = "small"
    for d in dims:
        s = _dims(d)
        if s is None or not s:
            continue
        if s in shapes:
            seen = "weight"
        elif math.prod(s) > 1 and s not in small:
            return "other"
    return seen


def _chain(order: np.ndarray, pos: int, end: int, names: np.ndarray, inputs: _Inputs,
           weight: tuple[int, ...]) -> list[int]:
    """Rows of the chain in order[start:end] (start: after the GEMM before position `pos`)."""
    start = pos
    while start > 0 and not GEMM_OPS.search(str(names[order[start - 1]])):
        start -= 1
    roles = [(int(r), _role(inputs(int(r))[0], weight) if CHAIN_OPS.search(str(names[r])) else "other")
             for r in order[start:end].tolist()]
    hits = [i for i, (_, role) in enumerate(roles) if role == "weight"]
    if not hits:
        return []
    return [r for r, role in roles[hits[0]:hits[-1] + 1] if role != "other"]


def _consumer(order: np.ndarray, pos: int, names: np.ndarray, inputs: _Inputs, shape: tuple[int, ...],
              dst: str) -> tuple[int, tuple[int, ...]] | None:
    """(position in `order`, the operand's shape) of the GEMM after `pos` whose weight operand is the
    converted tensor (its shape or transpose, dtype `dst`), within MAX_AHEAD ops."""
    for j in range(pos + 1, min(pos + 1 + MAX_AHEAD, len(order))):
        name = str(names[order[j]])
        arg = WEIGHT_ARG.get(name)
        if arg is None:
            continue
        dims, types = inputs(int(order[j]))
        w = _dims(dims[arg]) if len(dims) > arg else None
        if w is not None and len(w) == 2 and w in (shape, shape[::-1]) and len(types) > arg and str(types[arg]) == dst:
            return j, w
    return None


def _output_scale(order: np.ndarray, j: int, names: np.ndarray, inputs: _Inputs, n_out: int) -> int:
    """The row of a `mul` right after the GEMM at position j by a per-output-channel vector, -1 none."""
    if j + 1 >= len(order) or not OUTPUT_SCALE.search(str(names[order[j + 1]])):
        return -1
    dims = inputs(int(order[j + 1]))[0]
    a = _dims(dims[0]) if dims else None
    b = _dims(dims[1]) if len(dims) > 1 else None
    if a and b and a[-1] == n_out and math.prod(b) == n_out and b[-1] == n_out:
        return int(order[j + 1])
    return -1


def _thread_chains(order: np.ndarray, anchors: dict[int, tuple[tuple[int, ...], str, str]], names: np.ndarray,
                   inputs: _Inputs) -> list[_Chain]:
    out: list[_Chain] = []
    taken: set[int] = set()
    for pos, row in enumerate(order.tolist()):
        found = anchors.get(int(row))
        if found is None or row in taken:
            continue
        shape, src, dst = found
        hit = _consumer(order, pos, names, inputs, shape, dst)
        if hit is None:
            continue
        j, w = hit
        ops = _chain(order, j, j, names, inputs, shape)
        if row not in ops:
            continue
        first_dims, first_types = inputs(ops[0])
        source = next(((s, str(first_types[i]) if i < len(first_types) else "") for i, d in enumerate(first_dims)
                       if (s := _dims(d)) is not None and s in (shape, shape[::-1])), (shape, src))
        scaled = any(str(names[r]).startswith(("aten::mul", "aten::div")) and _role(inputs(r)[0], shape) == "weight"
                     for r in ops)
        n_out = w[0] if str(names[order[j]]) == "aten::linear" else w[1]
        scale = _output_scale(order, j, names, inputs, n_out) if src in INT8 and not scaled else -1
        taken.update(ops)
        fake = any(FAKE_QUANT_OP.search(str(names[r])) for r in ops)
        out.append(_Chain(int(order[j]), w, source, FAKE_QUANT if fake else dst, ops, scale))
    return out


def _outside_reads(rank: RankTrace, seqs: tuple[StepOps, ...], skip: set[int], inputs: _Inputs,
                   sources: set[tuple[tuple[int, ...], str]]) -> set[tuple[tuple[int, ...], str]]:
    """The sources (shape, dtype) some launching op outside the chains and their GEMMs reads."""
    found: set[tuple[tuple[int, ...], str]] = set()
    for s in seqs:
        for row in s.rows.tolist():
            if row in skip:
                continue
            dims, types = inputs(int(row))
            for i, d in enumerate(dims):
                key = (_dims(d) or (), str(types[i]) if i < len(types) else "")
                if key in sources:
                    found.add(key)
    return found


def find_weight_converts(rank: RankTrace, steps: StepsOf, top: TopLevel, seqs: tuple[StepOps, ...],
                         rows: np.ndarray | None = None) -> WeightConverts:
    """The static weights converted every call of one rank (module docstring), over the selected GPU rows."""
    ops, gpu, rt = rank.ops, rank.gpu, rank.runtime
    none = WeightConverts(empty(), np.zeros(len(gpu), dtype=bool), np.zeros(len(gpu), dtype=bool),
                          np.zeros(len(rt), dtype=bool))
    if not len(ops) or not len(gpu) or not seqs or not matches(ops[tables.OP_NAME], GEMM_OPS).any():
        return none
    inputs = _Inputs(rank)
    anchors = _anchors(rank, top.top, inputs)
    if not anchors:
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    chains: list[tuple[int, _Chain]] = []
    for s in seqs:
        for _, order in s.threads:
            chains.extend((s.step, c) for c in _thread_chains(order, anchors, names, inputs))
    if not chains:
        return none
    skip = {r for _, c in chains for r in (*c.ops, c.consumer, c.scale) if r >= 0}
    outside = _outside_reads(rank, seqs, skip, inputs, {c.source for _, c in chains})
    chains = [(step, c) for step, c in chains if c.source not in outside]
    if not chains:
        return none
    return _result(rank, top, chains, names, rows, none)


def _result(rank: RankTrace, top: TopLevel, chains: list[tuple[int, _Chain]], names: np.ndarray,
            rows: np.ndarray | None, none: WeightConverts) -> WeightConverts:
    gpu_top = np.where(rows, top.gpu_top, -1) if rows is not None else top.gpu_top
    dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float)
    n_ops = len(rank.ops)
    chain_of = np.full(n_ops, -1, dtype=np.int64)
    consumer_of = np.full(n_ops, -1, dtype=np.int64)
    for i, (_, c) in enumerate(chains):
        chain_of[[*c.ops, *([c.scale] if c.scale >= 0 else [])]] = i
        consumer_of[c.consumer] = i
    g_chain = np.where(gpu_top >= 0, chain_of[np.maximum(gpu_top, 0)], -1)
    g_consumer = np.where(gpu_top >= 0, consumer_of[np.maximum(gpu_top, 0)], -1)
    rt_chain = np.where(top.rt_top >= 0, chain_of[np.maximum(top.rt_top, 0)], -1)
    launches = top.launches
    kernels = np.bincount(np.maximum(g_chain, 0), weights=(g_chain >= 0).astype(float), minlength=len(chains))
    time = np.bincount(np.maximum(g_chain, 0), weights=np.where(g_chain >= 0, dur, 0.0), minlength=len(chains))
    gemm = np.bincount(np.maximum(g_consumer, 0), weights=np.where(g_consumer >= 0, dur, 0.0), minlength=len(chains))
    groups: dict[tuple[int, str, tuple[int, ...], tuple[tuple[int, ...], str], str], dict[str, object]] = {}
    for i, (step, c) in enumerate(chains):
        if not kernels[i]:
            continue  # outside the selected rows
        key = (step, str(names[c.consumer]), c.weight, c.source, c.to)
        g = groups.setdefault(key, {WC_OPS: " → ".join(str(names[r]) for r in c.ops), WC_CALLS: 0, WC_LAUNCHES: 0.0,
                                    WC_KERNELS: 0.0, WC_TIME_US: 0.0, WC_GEMM_US: 0.0, WC_OUTPUT_SCALE: 0})
        g[WC_CALLS] = int(str(g[WC_CALLS])) + 1
        g[WC_LAUNCHES] = float(str(g[WC_LAUNCHES])) + float(launches[[*c.ops, *([c.scale] if c.scale >= 0 else [])]].sum())
        g[WC_KERNELS] = float(str(g[WC_KERNELS])) + float(kernels[i])
        g[WC_TIME_US] = float(str(g[WC_TIME_US])) + float(time[i])
        g[WC_GEMM_US] = float(str(g[WC_GEMM_US])) + float(gemm[i])
        g[WC_OUTPUT_SCALE] = int(str(g[WC_OUTPUT_SCALE])) + (c.scale >= 0)
    if not groups:
        return none
    recs = [{WC_STEP: step, WC_CONSUMER: consumer, WC_WEIGHT: str(list(weight)),
             WC_SOURCE: f"{list(source[0])} {source[1]}", WC_TO: to, **g,
             WC_WEIGHT_BYTES: float(math.prod(weight) * _itemsize(to, source[1]))}
            for (step, consumer, weight, source, to), g in sorted(groups.items(), key=lambda kv: str(kv[0]))]
    return WeightConverts(pd.DataFrame(recs, columns=list(CONVERT_COLUMNS)), g_chain >= 0, g_consumer >= 0,
                          rt_chain >= 0)


def merged(a: WeightConverts, b: WeightConverts) -> WeightConverts:
    """Two detectors' rows and masks as one result (weight chains, and autocast's casts: autocast_weights.py)."""
    if not len(b.table):
        return a
    if not len(a.table):
        return b
    return WeightConverts(pd.concat([a.table, b.table], ignore_index=True), a.in_convert | b.in_convert,
                          a.consumers | b.consumers, a.calls | b.calls)
