"""Rules about decode: serve requests in batches (what one forward's host and launch work is shared by), and weight-only quantization of GEMVs at the memory roof."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.suggestions.common import Scope, fmt_bytes, fmt_us, gemm_dims, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_align import VOCAB_DIM_MIN
from tracekit.suggestions.rules_kernels import gemm_rows

DECODE_MAX_M = 16  # GEMM rows with at most this many rows (tokens) are GEMV-like
DECODE_BATCH = 8  # batch_decode batches at most this many of the requests one step serves
MIN_REQUESTS = 2  # fewer prompts per step: one request at a time, nothing to batch it with
# A decode step is made of GEMV-shaped GEMMs: they hold at least this share of its GEMM time. A step
# whose GEMM time is large GEMMs with a few small ones beside them (a diffusion transformer's timestep
# and modulation MLPs next to its attention blocks: xDiT Flux: 8 % of its GEMM time) is not decode.
DECODE_GEMM_SHARE = 0.5
# quantize_weights: a GEMV "at the memory roof" reaches at least this % of the HBM bandwidth, and its
# weight matrix is at least this share of the bytes it moves (batch of a few rows: the weights dominate).
QUANT_MIN_MEMORY_PCT = 50.0
QUANT_MIN_WEIGHT_SHARE = 0.5
QUANT_BYTES = {"int8": 1.0, "int4": 0.5}  # bytes per weight of the weight-only formats (scales left out)
QUANT_DTYPES = ("bf16", "fp16", "fp32")


def decode_rows(analysis: Analysis) -> tuple[list[tuple[dict[str, Any], tuple[int, int, int]]], float] | None:
    """(GEMV-shaped memory-bound GEMM rows with their (M, N, K), the GEMM time of all rows), or None when
    this is not a decode step (training, no device, or GEMV rows under DECODE_GEMM_SHARE of the GEMM time)."""
    if analysis.device is None or any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None  # a training step's small GEMMs (weight gradients, heads) are not decode requests
    gemms = gemm_rows(analysis)
    gemm_us = sum(row["time_us"] for row in gemms)
    picked = []
    for row in gemms:
        dims = gemm_dims(row["op"], row["shapes"])
        if dims is not None and dims[0] <= DECODE_MAX_M and row.get("bound") == "memory":
            picked.append((row, dims))
    if not picked or sum(row["time_us"] for row, _ in picked) < DECODE_GEMM_SHARE * gemm_us:
        return None
    return picked, gemm_us


def _requests(analysis: Analysis) -> float | None:
    """Requests whose prompt runs in the window: forwards (calls of the vocabulary-sized LM head, one per
    forward) × the share of a layer weight's calls that are prompts (more than DECODE_MAX_M rows). None
    without an LM head or a weight called both ways."""
    forwards = 0
    calls: dict[tuple[int, int], list[int]] = {}
    for row in gemm_rows(analysis):
        dims = gemm_dims(row["op"], row["shapes"])
        if dims is None:
            continue
        if dims[1] >= VOCAB_DIM_MIN:
            forwards += int(row["count"])
            continue
        calls.setdefault((dims[1], dims[2]), [0, 0])[dims[0] > DECODE_MAX_M] += int(row["count"])
    both = [(d, p) for d, p in calls.values() if d and p]
    if not forwards or not both:
        return None
    decode, prompt = max(both, key=lambda x: x[0] + x[1])
    return forwards * prompt / (decode + prompt)


def batch_decode(analysis: Analysis) -> Suggestion | None:
    """Requests decoded one at a time (GEMVs of one row, prompts arriving inside the window): B of them
    in one batched forward share its host work, launches and weight reads: the step ÷ B, plus the
    GEMVs' extra compute at B rows."""
    scope = Scope.of(analysis)
    found = decode_rows(analysis)
    if found is None:
        return None
    decode = [(row, dims) for row, dims in found[0] if dims[0] == 1]
    if sum(row["time_us"] for row, _ in decode) < DECODE_GEMM_SHARE * found[1]:
        return None  # batched already: most GEMM time has several rows
    found_requests = _requests(analysis)
    requests = found_requests / (scope.steps * scope.ranks) if found_requests is not None else None
    if requests is None or requests < MIN_REQUESTS - 0.5:
        return None  # one request (nothing to batch it with), or the requests cannot be counted
    b = max(min(DECODE_BATCH, round(requests)), MIN_REQUESTS)
    rows, gemv_us, grown = [], 0.0, 0.0
    for row, dims in decode:
        peak = (row.get("peak_tflops") or 0.0) * 1e12
        t = row["time_us"]
        at_b = max(t, b * row["flops"] / peak * 1e6) if peak > 0 else t
        gemv_us += t
        grown += at_b - t
        rows.append({"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "m": dims[0],
                     "count": int(row["count"]), "time_us": t, "achieved_gbps": row["achieved_gbps"],
                     "memory_pct": row.get("memory_pct"), "batch": b, "time_at_batch_us": at_b})
    span = scope.span_us * scope.ranks
    new = (span + grown) / b
    saving = (span - new) / scope.ranks
    if saving <= 0:
        return None
    rows.sort(key=lambda x: -x["time_us"])
    formula = (f"the step's work for {b} requests in one batched forward (host work, launches and weight reads "
               f"shared; at most {DECODE_BATCH}): span − (span + the GEMVs' extra compute at "
               f"{b} rows) / {b} = {fmt_us(span / scope.ranks)} − ({fmt_us(span / scope.ranks)} + "
               f"{fmt_us(grown / scope.ranks)}) / {b} = {fmt_us(saving)} for the same tokens; "
               f"{requests:.1f} requests per step (LM-head calls × the share of a layer weight's calls "
               "that are prompts), decoded one after another")
    calls = sum(x["count"] for x in rows) / (scope.steps * scope.ranks)
    title = (f"Batch the decode requests: each runs alone at batch 1 ({calls:.0f} one-row GEMV calls per step), "
             f"so every token pays the forward's host work and launches for one request")
    return suggestion("batch_decode", title, saving, scope, formula, rows)


def quantize_weights(analysis: Analysis) -> Suggestion | None:
    """Memory-bound decode GEMVs whose weights dominate their bytes: weight-only int8 moves
    1 / itemsize of the weight bytes at the bandwidth reached now (int4: half that)."""
    scope = Scope.of(analysis)
    found = decode_rows(analysis)
    if found is None:
        return None
    rows, total, before, weight_total = [], 0.0, 0.0, 0.0
    for row, dims in found[0]:
        dtype = row["dtype"]
        if dtype not in QUANT_DTYPES or not (row.get("memory_pct") or 0.0) >= QUANT_MIN_MEMORY_PCT:
            continue
        size = DTYPE_SIZE.get(dtype, 4.0)
        weights = dims[1] * dims[2] * size * int(row["count"])
        share = min(weights / row["bytes"], 1.0) if row["bytes"] > 0 else 0.0
        if share < QUANT_MIN_WEIGHT_SHARE:
            continue
        t = row["time_us"]
        new = {f: t * (1 - share * (1 - per / size)) for f, per in QUANT_BYTES.items()}
        total += t - new["int8"]
        before += t
        weight_total += weights
        rows.append({"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "dtype": dtype,
                     "count": int(row["count"]), "time_us": t, "achieved_gbps": row["achieved_gbps"],
                     "memory_pct": row["memory_pct"], "weight_share": share, "int8_time_us": new["int8"],
                     "int4_time_us": new["int4"], "saving_us": t - new["int8"]})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    int4 = sum(x["time_us"] - x["int4_time_us"] for x in rows) / scope.ranks
    dtypes = "/".join(sorted({x["dtype"] for x in rows}))
    formula = (f"Σ t × weight share × (1 − 1 byte / {dtypes} bytes) over {len(rows)} GEMV rows at ≥ "
               f"{QUANT_MIN_MEMORY_PCT:.0f} % of the memory roof = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(saving)} (int8 weights at the bandwidth "
               f"reached now; int4: {fmt_us(int4)}); {fmt_bytes(weight_total / scope.ranks / scope.steps)} of "
               "weights read per step")
    calls = sum(x["count"] for x in rows) / (scope.steps * scope.ranks)
    title = (f"Quantize the weights (weight-only int8/int4): {calls:.0f} decode GEMV calls per step read "
             f"{fmt_bytes(weight_total / scope.ranks / scope.steps)} of {dtypes} weights at the memory roof")
    return suggestion("quantize_weights", title, saving, scope, formula, rows)
