"""Rules about what kernels do: fuse elementwise chains, SDPA and its head-dim fallback (lower precision: rules_precision.py; batch decode: rules_decode.py; aligned dims: rules_align.py)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import attention, layers, sdpa_fallback, sequences
from tracekit.analyzers.detectors import attention_mask as am
from tracekit.analyzers.launch import LAUNCH_BOUND
from tracekit.suggestions.common import (
    Scope,
    fmt_bytes,
    fmt_us,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_llm import loss_chains
from tracekit.units import plural

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
    for r in analysis.ranks:  # a compiled model's eager loss (a classifier's, a recommender's): compile it too
        compiled = r.patterns.compiled if r.patterns is not None else None
        ce = loss_chains(r) if compiled is not None and len(compiled) else None
        for row in ce.to_dict("records") if ce is not None else ():
            time_us, fused = float(row[layers.LC_TIME_US]), float(row[layers.LC_FUSED_US])
            if time_us - fused <= 0:
                continue
            total += time_us - fused
            launches_total += int(row[layers.LC_KERNELS]) - int(row[layers.LC_SEGMENTS])
            modes.add("a cross-entropy chain: its segments' time − their mean kernel time (one fused kernel each)")
            rows.append({"rank": r.rank, "ops": row[layers.LC_OPS], "shape": "", "dtype": "", "chain": layers.CROSS_ENTROPY,
                         "chains": int(row[layers.LC_SEGMENTS]), "kernels": int(row[layers.LC_KERNELS]),
                         "time_us": time_us, "bytes": math.nan, "avoided_bytes": 0.0, "saving_us": time_us - fused})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"Σ over {plural(len(rows), 'chain signature')} of " + " or ".join(sorted(modes))
               + f"; avoided = 2 × each intermediate tensor (written, then read back) = "
               f"{fmt_bytes(avoided_total / scope.ranks)}; each chain capped at its time minus one "
               f"kernel per chain = {fmt_us(saving)}")
    n = sum(x["chains"] for x in rows)
    title = (f"Fuse {n} chains of elementwise/normalization kernels (torch.compile): "
             f"{launches_total / scope.ranks:.0f} kernels and their intermediate tensors go away")
    loss = sum(x["saving_us"] for x in rows if x.get("chain"))
    if loss > total / 2:
        title = (f"Compile the loss too (torch.compile over the model and its cross-entropy: the cast, log_softmax, "
                 f"NLL and their backward fused): {n} chains, {launches_total / scope.ranks:.0f} kernels and their "
                 "intermediate tensors go away")
    return suggestion("fuse_elementwise", title, saving, scope, formula, rows)


def gemm_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """The rows of Analysis.kernels (KERNEL_COLUMNS) of class gemm with known FLOPs and a positive time."""
    k = _kernels(analysis)
    if k is None or not len(k):
        return []
    sel = k[(k["class"] == "gemm") & k["flops"].notna() & (k["time_us"] > 0)]
    return sel.to_dict("records")


def _fused_estimate_us(flops: float, io_bytes: float, dtype: str, analysis: Analysis) -> float | None:
    """A fused attention kernel's time: max(FLOPs / (FUSED_ATTENTION_EFF × the dtype's tensor peak),
    bytes / bandwidth); None without a device or a tensor peak for the dtype."""
    device = analysis.device
    peak = device.peak_flops(dtype) if device is not None and dtype in MATMUL_DTYPES else None
    if not peak or device is None or math.isnan(flops):
        return None
    return max(flops / (peak * FUSED_ATTENTION_EFF) * 1e6, io_bytes / device.memory_bandwidth * 1e6)


def _fallback_rows(analysis: Analysis, scope: Scope) -> list[dict[str, Any]]:
    """SDPA calls whose misaligned head dim made torch fall back, or that ran the math backend with
    aligned head dims (patterns.sdpa_fallback): their
    forward and backward kernel time − a fused kernel's (flash/efficient roof: _fused_estimate_us)."""
    rows = []
    for r, table in rank_tables(analysis, "sdpa_fallback"):
        for row in table.to_dict("records"):
            time_us = float(row[sdpa_fallback.SF_FWD_US]) + float(row[sdpa_fallback.SF_BWD_US])
            est = _fused_estimate_us(float(row[sdpa_fallback.SF_FLOPS]), float(row[sdpa_fallback.SF_IO_BYTES]),
                                     str(row[sdpa_fallback.SF_DTYPE]), analysis)
            if est is None or time_us - est <= 0:
                continue
            e = int(row[sdpa_fallback.SF_HEAD_DIM])
            rows.append({"rank": r.rank, "mode": "fallback", "shapes": row[sdpa_fallback.SF_SHAPES],
                         "mask": row[sdpa_fallback.SF_MASK] or "none", "dtype": row[sdpa_fallback.SF_DTYPE],
                         "head_dim": e, "pad_to": f"{-(-e // sdpa_fallback.ALIGN) * sdpa_fallback.ALIGN} or {-(-e // 64) * 64}",
                         "backend": row[sdpa_fallback.SF_BACKEND], "cause": row[sdpa_fallback.SF_CAUSE],
                         "calls_per_step": float(row[sdpa_fallback.SF_CALLS]) / scope.steps,
                         "kernels": row[sdpa_fallback.SF_KERNELS], "forward_us": row[sdpa_fallback.SF_FWD_US],
                         "backward_us": row[sdpa_fallback.SF_BWD_US], "time_us": time_us,
                         "flops": row[sdpa_fallback.SF_FLOPS], "sdpa_us": est, "saving_us": time_us - est})
    return rows


def _unfused_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """Unfused attention (patterns.attention): its forward chain and its backward on the score matrix
    (a training step) − a fused kernel's forward (+ backward: BACKWARD_FACTOR × the forward FLOPs,
    Q, K, V, O and their gradients once) at _fused_estimate_us; no device: the GEMMs' own time."""
    rows = []
    for r, table in rank_tables(analysis, "attention"):
        for row in table.to_dict("records"):
            bwd_us = float(row.get(attention.AT_BWD_US) or 0.0)
            factor = 1.0 + am.BACKWARD_FACTOR if bwd_us > 0 else 1.0
            est = row[attention.AT_GEMM_US] * factor  # no device: the GEMMs' own time (scores never stored)
            fused = _fused_estimate_us(row[attention.AT_FLOPS] * factor, row[attention.AT_IO_BYTES] * (2.0 if bwd_us > 0 else 1.0),
                                       row[attention.AT_DTYPE], analysis)
            if fused is not None and analysis.device is not None:
                est = fused
            time_us = row[attention.AT_TIME_US] + bwd_us
            if time_us - est <= 0:
                continue
            rows.append({"rank": r.rank, "mode": "unfused", "ops": row[attention.AT_OPS], "scores": row[attention.AT_SCORES],
                         "dtype": row[attention.AT_DTYPE], "count": row[attention.AT_COUNT],
                         "kernels": row[attention.AT_KERNELS] + float(row.get(attention.AT_BWD_KERNELS) or 0.0),
                         "forward_us": row[attention.AT_TIME_US], "backward_us": bwd_us, "time_us": time_us,
                         "gemm_us": row[attention.AT_GEMM_US], "other_us": row[attention.AT_OTHER_US],
                         "flops": row[attention.AT_FLOPS] * factor, "sdpa_us": est, "saving_us": time_us - est})
    return rows


def use_sdpa(analysis: Analysis) -> Suggestion | None:
    """Unfused attention: its forward chain + backward kernels on the score matrix − the fused
    kernels' forward + backward (_unfused_rows); SDPA fallen back to the math (or a slower fused)
    backend for a head dim that is not a multiple of 8: its forward + backward kernel time − the same
    fused estimate of the forward + backward FLOPs."""
    scope = Scope.of(analysis)
    fallback = _fallback_rows(analysis, scope)
    rows = _unfused_rows(analysis)
    total = sum(x["saving_us"] for x in rows)
    before = sum(x["time_us"] for x in rows)
    total += sum(x["saving_us"] for x in fallback)
    before += sum(x["time_us"] for x in fallback)
    rows += fallback
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    eff = f"{100 * FUSED_ATTENTION_EFF:.0f} %"
    formula = (f"Σ unfused time − fused estimate = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(saving)}; fused estimate = max(the "
               f"GEMMs' FLOPs / ({eff} of the dtype's tensor peak), Q+K+V+output bytes / bandwidth), "
               "no causal discount")
    if any(x["mode"] == "unfused" and x["backward_us"] > 0 for x in rows):
        formula += (f"; a hand-written attention's backward (the autograd ops on the score matrix: the four "
                    f"GEMMs, the softmax backward, the casts and the scale) is counted, against a fused forward + "
                    f"backward of (1 + {am.BACKWARD_FACTOR:g}) × the forward FLOPs and twice the Q+K+V+output bytes")
    if fallback:
        formula += (f"; an SDPA fallback counts its forward kernels (under the call) and backward kernels (the "
                    f"SDPA backward op's, or the autograd ops on the score matrix) against the forward + "
                    f"{am.BACKWARD_FACTOR:g} × forward FLOPs of a fused kernel")
    top = rows[0]
    if top["mode"] == "fallback" and top["cause"] == sdpa_fallback.SWITCHED_OFF:
        title = (f"SDPA ran its math backend on aligned {top['dtype']} inputs ({plural(sum(x['calls_per_step'] for x in fallback) / scope.ranks, 'call')} "
                 f"per step, {fmt_us(sum(x['time_us'] for x in fallback) / scope.ranks / scope.steps)} of forward + backward kernels per step): "
                 "the fused backends are switched off or refused the inputs; turn flash/efficient/cuDNN SDPA back on")
    elif top["mode"] == "fallback":
        e = top["head_dim"]
        title = (f"Head dim {e} is not a multiple of {sdpa_fallback.ALIGN}: SDPA fell back to {top['backend']} "
                 f"({plural(sum(x['calls_per_step'] for x in fallback) / scope.ranks, 'call')} per step, "
                 f"{fmt_us(sum(x['time_us'] for x in fallback) / scope.ranks / scope.steps)} of forward + backward "
                 f"kernels per step); pad it to {top['pad_to'].replace(' or ', '/')}")
    else:
        both = " in forward and backward" if any(x["mode"] == "unfused" and x["backward_us"] > 0 for x in rows) else ""
        title = (f"Use scaled_dot_product_attention: {plural(sum(x['count'] for x in rows if x['mode'] == 'unfused'), 'unfused attention')} write "
                 f"the score matrix to memory{both} (matmul → mask → softmax → matmul)")
    return suggestion("use_sdpa", title, saving, scope, formula, rows)
