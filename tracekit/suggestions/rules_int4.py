"""Rule about weight-only int4 GEMMs (tinygemm, `aten::_weight_int4pack_mm`) at prefill-sized M: bf16 weights on cuBLAS for large M, int4 kept for decode."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import GEMM
from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif import node_mask, step_costs
from tracekit.suggestions.common import Scope, fmt_bytes, fmt_us, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_align import DEVICE_ROOF_PCT
from tracekit.suggestions.whatif_evidence import rank_evidence
from tracekit.units import plural

# torch's weight-only int4 GEMMs: tinygemm on CUDA (torchao's int4 weight-only layout) and its CPU twin.
INT4_OPS = ("aten::_weight_int4pack_mm", "aten::_weight_int4pack_mm_for_cpu")
# Rows of x from which the int4 kernel is the wrong tool. A bf16 GEMM whose weights dominate its bytes
# does about M FLOPs per byte (2·M·N·K over 2·N·K); the bf16 ridge (dense peak / bandwidth) is
# 295 FLOP/B on the H100 SXM, 206 on the H200, 156 on the A100, ~70 % of that at the efficiency a cuBLAS
# GEMM reaches (DEVICE_ROOF_PCT). From M = 256 a bf16 GEMM is at or past its compute roof on these
# GPUs: the 4× fewer weight bytes of int4 buy no time, and tinygemm's tiles (m16n8k16 MMAs, 16 rows of
# x per M tile, every weight dequantised again for each 16 rows) run far below the bf16 MMA rate
# (heldout8 int4_prefill, H100: M = 4,096, 30 TFLOP/s = 3 % of the bf16 peak). Decode (M ≤ 16: one M
# tile, rules_decode.DECODE_MAX_M) is what the kernel is built for and stays far below this.
INT4_MIN_M = 256
# Fire on a row only when the cuBLAS reference would at least halve its time: "far below the roof".
FIRE_FACTOR = 2.0
INT4_WEIGHT_BYTES = 0.5  # bytes per weight: two int4 values per byte
BF16_WEIGHT_BYTES = 2.0
REFERENCE_DTYPE = "bf16"  # the MMA precision tinygemm dequantises to (x and the output are bf16)


def int4_dims(op: object, shapes: object) -> tuple[int, int, int] | None:
    """(M, N, K) of a weight-only int4 GEMM row from its op's recorded shapes: x [M, K] first,
    scales_and_zeros [K/group, N, 2] last (the packed weight between them). None for any other op."""
    if str(op or "") not in INT4_OPS or not isinstance(shapes, tuple):
        return None
    dims = [d for d in shapes if isinstance(d, tuple) and d and all(isinstance(v, int) for v in d)]
    if len(dims) < 3 or len(dims[0]) != 2 or len(dims[-1]) != 3 or dims[-1][2] != 2:
        return None
    (m, k), n = dims[0], dims[-1][1]
    return (m, n, k) if m > 0 and n > 0 and k > 0 else None


def cublas_us(device: Device, m: int, n: int, k: int, itemsize: float = 2.0) -> float | None:
    """One bf16 cuBLAS GEMM of (M, N, K) on bf16 weights: max(2·M·N·K / (DEVICE_ROOF_PCT % of the bf16
    peak), (x + 2·N·K weight bytes + the output) / bandwidth), in µs; None without a bf16 peak."""
    peak = device.peak_flops(REFERENCE_DTYPE)
    if not peak or not device.memory_bandwidth:
        return None
    nbytes = m * k * itemsize + n * k * BF16_WEIGHT_BYTES + m * n * itemsize
    return max(2.0 * m * n * k / (peak * DEVICE_ROOF_PCT / 100.0), nbytes / device.memory_bandwidth) * 1e6


def _row(row: dict[str, Any], device: Device) -> dict[str, Any] | None:
    """The evidence of one int4 GEMM kernel row at large M far below the cuBLAS reference, else None."""
    dims = int4_dims(row.get("op"), row.get("shapes"))
    t, count = float(row["time_us"]), int(row["count"])
    if dims is None or dims[0] < INT4_MIN_M or count <= 0 or not t > 0:
        return None
    m, n, k = dims
    per_call = cublas_us(device, m, n, k, DTYPE_SIZE.get(str(row.get("dtype")), 2.0))
    if per_call is None or per_call * count * FIRE_FACTOR > t:
        return None
    new = per_call * count
    return {"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "m": m, "n": n, "k": k,
            "count": count, "time_us": t, "achieved_tflops": row.get("achieved_tflops"),
            "roofline_pct": row.get("roofline_pct"), "int4_weight_bytes": n * k * INT4_WEIGHT_BYTES,
            "bf16_weight_bytes": n * k * BF16_WEIGHT_BYTES, "cublas_us_per_call": per_call,
            "new_time_us": new, "saving_us": t - new}


def int4_large_batch(analysis: Analysis) -> Suggestion | None:
    """Weight-only int4 GEMM kernels (tinygemm) with M ≥ INT4_MIN_M rows at under 1/FIRE_FACTOR of a
    bf16 cuBLAS GEMM's rate: each at the cuBLAS reference (cublas_us: DEVICE_ROOF_PCT of the bf16 roof,
    the weights read as bf16)."""
    scope = Scope.of(analysis)
    device, k = analysis.device, analysis.kernels
    if device is None or k is None or not len(k):
        return None
    sel = k[(k["class"] == GEMM) & k["op"].isin(INT4_OPS) & (k["time_us"] > 0)]
    rows = [found for row in sel.to_dict("records") if (found := _row(row, device)) is not None]
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    before = sum(x["time_us"] for x in rows) / scope.ranks
    after = sum(x["new_time_us"] for x in rows) / scope.ranks
    saving = before - after
    n = scope.steps * scope.ranks
    calls = sum(x["count"] for x in rows) / n
    weights = sum(x["int4_weight_bytes"] * x["count"] for x in rows) / n
    flops = sum(2.0 * x["m"] * x["n"] * x["k"] * x["count"] for x in rows)
    rate = flops / (before * scope.ranks) / 1e6 if before > 0 else math.nan  # TFLOP/s
    peak = (device.peak_flops(REFERENCE_DTYPE) or math.nan) / 1e12
    ms = sorted({x["m"] for x in rows})
    m_text = f"M = {ms[0]:,}" if len(ms) == 1 else f"M = {ms[0]:,}–{ms[-1]:,}"
    formula = (f"Σ t − t' over {plural(len(rows), 'int4 GEMM row')} ({m_text} ≥ {INT4_MIN_M}) = {fmt_us(before)} − "
               f"{fmt_us(after)} = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step); t' per call = "
               f"max(2·M·N·K / ({DEVICE_ROOF_PCT:.0f} % of the bf16 peak, {peak:.0f} TFLOP/s: an aligned cuBLAS "
               f"GEMM), (x + 2·N·K bytes of bf16 weights + the output) / {device.memory_bandwidth / 1e9:.0f} GB/s); "
               f"the weights read as bf16: 4× the int4 N·K/2 bytes ({fmt_bytes(weights)} of int4 per step now)")
    title = (f"Use bf16 weights (cuBLAS) for the large-M int4 GEMMs, keep int4 for decode: "
             f"{plural(round(calls), 'tinygemm call')} per step with {m_text} rows run at {rate:.0f} TFLOP/s "
             f"({100 * rate / peak:.0f} % of the bf16 peak)")
    return suggestion("int4_large_batch", title, saving, scope, formula, rows)


def large_m_rows(r: RankAnalysis, keys: set[tuple[str, object]] | None = None) -> np.ndarray:
    """Per rank.gpu row: the cuBLAS reference time (µs) of its int4 GEMM call with M ≥ INT4_MIN_M
    (its main kernel's row; `keys`: only those (op, shapes)), NaN elsewhere."""
    costs = r.costs.table
    out = np.full(len(costs), np.nan)
    device = r.roofline.device
    if device is None or not len(costs):
        return out
    ops = costs[attribution.OP].to_numpy(dtype=object)
    main = costs[attribution.ROLE].to_numpy(dtype=object) == attribution.ROLE_MAIN
    for i in np.flatnonzero(np.isin(ops, INT4_OPS) & main).tolist():
        shapes = costs[attribution.SHAPES].iat[i]
        dims = int4_dims(ops[i], shapes)
        if dims is None or dims[0] < INT4_MIN_M or (keys is not None and (ops[i], shapes) not in keys):
            continue
        us = cublas_us(device, *dims)
        out[i] = us if us is not None else np.nan
    return out


def int4_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The flagged int4 GEMM kernels (the evidence's (op, shapes) on this rank) take the cuBLAS
    reference time of their call (never longer than now); everything else as it is."""
    keys = {(str(e.get("op")), e.get("shapes")) for e in rank_evidence(s, r)}
    new = large_m_rows(r, keys)
    if not keys or np.isnan(new).all():
        return None

    def apply(step: StepModel) -> ReplayCosts:
        _, _, g_dur, _ = step_costs(step)
        mine = node_mask(step, ~np.isnan(new))
        target = new[step.graph.gpu_row] if len(new) else np.full(step.graph.n_gpu, np.nan)
        faster = np.minimum(g_dur, np.nan_to_num(target, nan=np.inf))
        return dataclasses.replace(step.costs, gpu_dur_us=np.where(mine, faster, g_dur))

    return apply


def int4_large_calls(a: Analysis) -> int:
    """Weight-only int4 GEMM kernel calls with M ≥ INT4_MIN_M over the headline steps, all ranks
    (what the change leaves none of: compare/applied.py)."""
    k = a.kernels
    if k is None or not len(k):
        return 0
    return sum(int(row["count"]) for row in k[k["op"].isin(INT4_OPS)].to_dict("records")
               if (d := int4_dims(row["op"], row["shapes"])) is not None and d[0] >= INT4_MIN_M)
