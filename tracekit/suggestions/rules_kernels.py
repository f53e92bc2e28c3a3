"""Rules about what kernels do: fuse elementwise chains, batch decode, lower precision, SDPA (aligned dims: rules_align.py)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import sequences
from tracekit.analyzers.launch import LAUNCH_BOUND
from tracekit.suggestions.common import (
    Scope,
    fmt_bytes,
    fmt_us,
    gemm_dims,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion

DECODE_MAX_M = 16  # GEMM rows with at most this many rows (tokens) are GEMV-like
DECODE_BATCH = 8  # the batch the batch_decode estimate assumes
# A decode step is made of GEMV-shaped GEMMs: they hold at least this share of its GEMM time. A step
# whose GEMM time is large GEMMs with a few small ones beside them (a diffusion transformer's timestep
# and modulation MLPs next to its attention blocks: xDiT Flux: 8 % of its GEMM time) is not decode.
DECODE_GEMM_SHARE = 0.5
# The rate a fused attention kernel is assumed to reach, as a share of the device's dense tensor
# peak for the dtype (validated on H200: docs/validation.md, suggestions section).
FUSED_ATTENTION_EFF = 0.35
MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def _kernels(analysis: Analysis) -> pd.DataFrame:
    return analysis.kernels


def fuse_elementwise(analysis: Analysis) -> Suggestion | None:
    """Elementwise/normalization chains: avoided intermediate bytes / the bandwidth the chain achieved
    (at most the device's; GPU-bound ranks), or the launches fusion removes × the mean launch call
    (launch-bound ranks)."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total, avoided_total, launches_total = [], 0.0, 0.0, 0
    modes = set()
    for r, table in rank_tables(analysis, "chains"):
        lo = r.launch
        launch_bound = lo.verdict == LAUNCH_BOUND
        per_launch = lo.totals.cpu_launch_us / lo.totals.launches if lo.totals.launches else 0.0
        for row in table.to_dict("records"):
            k = row[sequences.CH_KERNELS]
            count = row[sequences.CH_COUNT]
            time_us = row[sequences.CH_TIME_US]
            cap = time_us * (1 - count / k) if k else 0.0  # the fused kernels still run once each
            if launch_bound:
                saving = min((k - count) * per_launch, cap)
                modes.add(f"launch-bound: (kernels − chains) × {fmt_us(per_launch)} per launch call (mean)")
            else:
                achieved = (row[sequences.CH_BYTES] / time_us * 1e6 if time_us > 0 and not math.isnan(row[sequences.CH_BYTES])
                            else math.inf)
                peak = device.memory_bandwidth if device is not None else math.inf
                bw = min(achieved, peak)
                if not 0 < bw < math.inf:
                    continue
                saving = min(row[sequences.CH_AVOIDED_BYTES] / bw * 1e6, cap)
                modes.add("avoided bytes / the bandwidth the chain's kernels achieved"
                          + (f" (at most {device.memory_gbps:.0f} GB/s, {device.name})" if device is not None else ""))
            if saving <= 0:
                continue
            total += saving
            avoided_total += row[sequences.CH_AVOIDED_BYTES]
            launches_total += k - count
            rows.append({"rank": r.rank, "ops": row[sequences.CH_OPS], "shape": row[sequences.CH_SHAPE],
                         "dtype": row[sequences.CH_DTYPE], "chains": count, "kernels": k, "time_us": time_us,
                         "bytes": row[sequences.CH_BYTES], "avoided_bytes": row[sequences.CH_AVOIDED_BYTES],
                         "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"Σ over {len(rows)} chain signature(s) of " + " or ".join(sorted(modes))
               + f"; avoided = 2 × each intermediate tensor (written, then read back) = "
               f"{fmt_bytes(avoided_total / scope.ranks)}; each chain capped at its time minus one "
               f"kernel per chain = {fmt_us(saving)}")
    n = sum(x["chains"] for x in rows)
    title = (f"Fuse {n} chains of elementwise/normalization kernels (torch.compile): "
             f"{launches_total / scope.ranks:.0f} kernels and their intermediate tensors go away")
    return suggestion("fuse_elementwise", title, saving, scope, formula, rows)


def _gemm_rows(analysis: Analysis) -> list[dict[str, Any]]:
    k = _kernels(analysis)
    if k is None or not len(k):
        return []
    sel = k[(k["class"] == "gemm") & k["flops"].notna() & (k["time_us"] > 0)]
    return sel.to_dict("records")


def batch_decode(analysis: Analysis) -> Suggestion | None:
    """Memory-bound GEMMs with M ≤ DECODE_MAX_M: per-token time at batch B = max(t, B × FLOPs / peak) / B."""
    scope = Scope.of(analysis)
    device = analysis.device
    if device is None or any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None  # a training step's small GEMMs (weight gradients, heads) are not decode requests
    rows, total, before = [], 0.0, 0.0
    gemms = _gemm_rows(analysis)
    gemm_us = sum(row["time_us"] for row in gemms)
    for row in gemms:
        dims = gemm_dims(row["op"], row["shapes"])
        if dims is None or dims[0] > DECODE_MAX_M or row.get("bound") != "memory":
            continue
        peak = (row.get("peak_tflops") or 0.0) * 1e12
        t = row["time_us"]
        compute = DECODE_BATCH * row["flops"] / peak * 1e6 if peak > 0 else 0.0
        per_token = max(t, compute) / DECODE_BATCH
        saving = t - per_token
        if saving <= 0:
            continue
        total += saving
        before += t
        rows.append({"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "m": dims[0],
                     "count": int(row["count"]), "time_us": t, "achieved_gbps": row["achieved_gbps"],
                     "memory_pct": row.get("memory_pct"), "per_token_us": per_token, "saving_us": saving})
    if not rows or before < DECODE_GEMM_SHARE * gemm_us:
        return None  # not a decode step: its GEMM time is mostly large GEMMs
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"GPU time per generated token: Σ (t − max(t, {DECODE_BATCH} × FLOPs / peak) / {DECODE_BATCH}) "
               f"over {len(rows)} memory-bound GEMM rows with M ≤ {DECODE_MAX_M} = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(total / scope.ranks)} (the weights are read once for "
               f"{DECODE_BATCH} requests; a throughput gain, not a shorter step)")
    title = (f"Batch decode requests: {sum(x['count'] for x in rows)} GEMV-shaped GEMM calls (M ≤ "
             f"{DECODE_MAX_M}) are memory-bound")
    return suggestion("batch_decode", title, saving, scope, formula, rows)


def lower_precision(analysis: Analysis) -> Suggestion | None:
    """Compute-bound fp32 GEMMs on the fp32 roof: time at the same efficiency on the TF32 roof."""
    scope = Scope.of(analysis)
    device = analysis.device
    fast = device.peak_flops("tf32") if device is not None else None
    if device is None or not fast:
        return None
    rows, total, before = [], 0.0, 0.0
    for row in _gemm_rows(analysis):
        if row["dtype"] != "fp32" or row.get("roof") not in ("fp32", "fp32_matrix") or row.get("bound") != "compute":
            continue
        slow = (row.get("peak_tflops") or 0.0) * 1e12
        achieved = row["achieved_tflops"] * 1e12
        if slow <= 0 or achieved > slow * 1.05:  # above the fp32 peak: already on tensor cores
            continue
        eff = achieved / slow
        t = row["time_us"]
        new = max(row["flops"] / (fast * eff) * 1e6,
                  row["bytes"] / device.memory_bandwidth * 1e6 if not math.isnan(row["bytes"]) else 0.0)
        if new >= t:
            continue
        total += t - new
        before += t
        rows.append({"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "count": int(row["count"]),
                     "time_us": t, "achieved_tflops": row["achieved_tflops"], "fp32_peak_tflops": slow / 1e12,
                     "efficiency_pct": 100 * eff, "tf32_time_us": new, "saving_us": t - new})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"Σ t − max(FLOPs / (TF32 peak {fast / 1e12:.0f} TFLOP/s × the efficiency each GEMM reaches on "
               f"the fp32 roof), bytes / {device.memory_gbps:.0f} GB/s) = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(total / scope.ranks)} (bf16 would halve the bytes too)"
              )
    title = (f"Enable TF32 (or bf16 autocast) for {sum(x['count'] for x in rows)} fp32 GEMM calls "
             f"running on the fp32 roof")
    return suggestion("lower_precision", title, saving, scope, formula, rows)


def use_sdpa(analysis: Analysis) -> Suggestion | None:
    """Unfused attention: chain time − max(FLOPs / (peak × FUSED_ATTENTION_EFF), Q+K+V+O bytes / bandwidth)."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total, before = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "attention"):
        for row in table.to_dict("records"):
            est = row[sequences.AT_GEMM_US]  # no device: the two GEMMs' own time (scores never stored)
            peak = device.peak_flops(row[sequences.AT_DTYPE]) if device is not None and row[sequences.AT_DTYPE] in MATMUL_DTYPES else None
            if peak and device is not None and not math.isnan(row[sequences.AT_FLOPS]):
                est = max(row[sequences.AT_FLOPS] / (peak * FUSED_ATTENTION_EFF) * 1e6,
                          row[sequences.AT_IO_BYTES] / device.memory_bandwidth * 1e6)
            saving = row[sequences.AT_TIME_US] - est
            if saving <= 0:
                continue
            total += saving
            before += row[sequences.AT_TIME_US]
            rows.append({"rank": r.rank, "ops": row[sequences.AT_OPS], "scores": row[sequences.AT_SCORES], "dtype": row[sequences.AT_DTYPE],
                         "count": row[sequences.AT_COUNT], "kernels": row[sequences.AT_KERNELS], "time_us": row[sequences.AT_TIME_US],
                         "gemm_us": row[sequences.AT_GEMM_US], "other_us": row[sequences.AT_OTHER_US], "flops": row[sequences.AT_FLOPS],
                         "sdpa_us": est, "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    eff = f"{100 * FUSED_ATTENTION_EFF:.0f} %"
    formula = (f"Σ unfused time − fused estimate = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(saving)}; fused estimate = max(the two "
               f"GEMMs' FLOPs / ({eff} of the dtype's tensor peak), Q+K+V+output bytes / bandwidth), "
               "no causal discount")
    title = (f"Use scaled_dot_product_attention: {sum(x['count'] for x in rows)} unfused attention(s) write "
             "the score matrix to memory (matmul → mask → softmax → matmul)")
    return suggestion("use_sdpa", title, saving, scope, formula, rows)
