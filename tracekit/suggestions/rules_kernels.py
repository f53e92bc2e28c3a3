"""Rules about what kernels do: fuse elementwise chains, SDPA (lower precision: rules_precision.py; batch decode: rules_decode.py; aligned dims: rules_align.py)."""

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
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
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
    return suggestion("fuse_elementwise", title, saving, scope, formula, rows)


def _gemm_rows(analysis: Analysis) -> list[dict[str, Any]]:
    k = _kernels(analysis)
    if k is None or not len(k):
        return []
    sel = k[(k["class"] == "gemm") & k["flops"].notna() & (k["time_us"] > 0)]
    return sel.to_dict("records")


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
    title = (f"Use scaled_dot_product_attention: {plural(sum(x['count'] for x in rows), 'unfused attention')} write "
             "the score matrix to memory (matmul → mask → softmax → matmul)")
    return suggestion("use_sdpa", title, saving, scope, formula, rows)
