"""Rules about fused attention calls: is_causal=True instead of a square attention mask."""

from __future__ import annotations

import math

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import attention_mask as am
from tracekit.suggestions.common import Scope, fmt_us, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import FUSED_ATTENTION_EFF, MATMUL_DTYPES
from tracekit.units import plural

CAUSAL_SHARE = 0.5  # the tiles above the diagonal: what a causal kernel skips
CAUSAL_MIN_PCT = 2.0  # silent below this share of the step


def causal_mask(analysis: Analysis) -> Suggestion | None:
    """SDPA with a square mask and is_causal False: fused backends, half the attention kernel time;
    the math backend, its kernel time − a causal fused kernel's (half the FLOPs at FUSED_ATTENTION_EFF
    of the dtype's tensor peak)."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total, certain, modes = [], 0.0, True, set()
    for r, table in rank_tables(analysis, "masked_attention"):
        for row in table.to_dict("records"):
            backend = str(row[am.MA_BACKEND])
            if backend in am.FUSED_BACKENDS:
                time_us = float(row[am.MA_ATTN_US])
                saving = CAUSAL_SHARE * time_us
                modes.add(f"{backend}: {CAUSAL_SHARE:g} × the attention kernels' time")
            else:
                time_us = float(row[am.MA_TIME_US])
                dtype = str(row[am.MA_DTYPE])
                peak = device.peak_flops(dtype) if device is not None and dtype in MATMUL_DTYPES else None
                est = am.flash_estimate_us(float(row[am.MA_FLOPS]), peak, FUSED_ATTENTION_EFF)
                if math.isnan(est):
                    saving = CAUSAL_SHARE * time_us
                    modes.add(f"math: {CAUSAL_SHARE:g} × its kernels' time (no tensor peak for {dtype})")
                else:
                    saving = time_us - est
                    modes.add(f"math: its kernels' time − FLOPs / 2 / ({100 * FUSED_ATTENTION_EFF:.0f} % of the "
                              "dtype's tensor peak), a causal fused kernel")
            if saving <= 0:
                continue
            total += saving
            certain &= bool(row[am.MA_TRIANGLE])
            rows.append({"rank": r.rank, "op": row[am.MA_OP], "shapes": row[am.MA_SHAPES], "mask": row[am.MA_MASK],
                         "dtype": row[am.MA_DTYPE], "backend": backend,
                         "causal": "built by aten::tril/triu in the step" if row[am.MA_TRIANGLE]
                         else "if the mask is causal",
                         "calls_per_step": float(row[am.MA_CALLS]) / scope.steps,
                         "kernel_us_per_step": time_us / scope.steps,
                         "saving_us_per_step": saving / scope.steps, "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"Σ over {plural(len(rows), 'masked call signature')} of " + "; ".join(sorted(modes))
               + f" = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    calls = sum(x["calls_per_step"] for x in rows) / scope.ranks
    backends = ", ".join(sorted({x["backend"] for x in rows}))
    title = (f"Pass is_causal=True instead of a square attn_mask: {plural(calls, 'SDPA call')} per step "
             f"({backends} backend) run every tile"
             + ("" if certain else " (if the mask is causal)"))
    if any(x["backend"] == am.MATH for x in rows):
        title += "; the mask also keeps flash out (math backend ran)"
    return suggestion("causal_mask", title, saving, scope, formula, rows, min_pct=CAUSAL_MIN_PCT)
