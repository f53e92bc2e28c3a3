"""Rule about a weight shared by a batch, expanded to it and multiplied with bmm (one matmul over the flattened batch instead), and its what-if transform."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.analyzers.detectors import expanded_bmm as eb
from tracekit.analyzers.devices import Device
from tracekit.model.whatif import Transform, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import rank_evidence
from tracekit.units import plural


def flat_roof(r: RankAnalysis, device: Device) -> np.ndarray:
    """Per rank.gpu row of an expanded call's GEMM: its roof (µs) as one GEMM over the flattened batch,
    max(its FLOPs at the dtype's peak, its bytes with each expanded-shape tensor read or written once
    instead of B times at the memory bandwidth); NaN elsewhere or where unknown."""
    p = r.patterns
    costs = r.costs.table
    out = np.full(len(costs), np.nan)
    if p is None or len(p.expanded_part) != len(costs) or not len(p.expanded_bmm):
        return out
    batch = float(p.expanded_bmm[eb.EB_BATCH].max())
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    dtypes = costs[attribution.DTYPE].to_numpy(dtype=object)
    for i in np.flatnonzero(p.expanded_part == eb.PART_GEMM).tolist():
        peak = device.peak_flops(str(dtypes[i])) if dtypes[i] else None
        if not peak or np.isnan(flops[i]) or np.isnan(nbytes[i]):
            continue
        once = p.expanded_touched[i] * DTYPE_SIZE.get(str(dtypes[i]), 2.0) * (1.0 - 1.0 / batch)
        out[i] = max(flops[i] / peak, max(nbytes[i] - once, 0.0) / device.memory_bandwidth) * 1e6
    return out


def flatten_bmm(analysis: Analysis) -> Suggestion | None:
    """Calls multiplying by an expanded weight (patterns.expanded_bmm) in every headline step: the casts,
    copies and sums over the batch gone, each GEMM at its flattened roof (flat_roof; its time where
    unknown). Silent below SILENT_BELOW_PCT."""
    device = analysis.device
    if device is None:
        return None
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    head: tuple[float, str, float] | None = None  # calls per step, shape, µs per step
    for r, t, n in every_step_tables(analysis, "expanded_bmm", eb.EB_STEP):
        p = r.patterns
        roof = flat_roof(r, device)
        gemm = (p.expanded_part == eb.PART_GEMM) & np.isin(p.expanded_step, t[eb.EB_STEP].to_numpy())
        dur = p.expanded_us
        kept = float(np.where(np.isnan(roof[gemm]), dur[gemm], np.minimum(dur[gemm], roof[gemm])).sum())
        spent = float((t[eb.EB_GEMM_US] + t[eb.EB_OTHER_US]).sum())
        saving = max(spent - kept, 0.0)
        total += saving
        rows.append({"rank": r.rank, "calls_per_step": float(t[eb.EB_CALLS].sum()) / n, "batch": int(t[eb.EB_BATCH].max()),
                     "largest_expanded": str(t[eb.EB_SHAPE].iat[0]), "gemm_us_per_step": float(t[eb.EB_GEMM_US].sum()) / n,
                     "other_us_per_step": float(t[eb.EB_OTHER_US].sum()) / n, "flat_gemm_us_per_step": kept / n,
                     "saving_us_per_step": saving / n})
        head = head or (float(t[eb.EB_CALLS].sum()) / n, str(t[eb.EB_SHAPE].iat[0]), spent / n)
    if head is None:
        return None
    calls, shape, spent_per_step = head
    saving = total / scope.ranks
    title = (f"Multiply by the shared weight once over the flattened batch (x @ w, or x.flatten(0, -2) @ w) "
             f"instead of bmm against w.expand(B, ...): {plural(round(calls), 'call')} per step materialise and "
             f"differentiate a {shape} expanded weight ({fmt_us(spent_per_step)} per step)")
    formula = (f"the kernels of the expanded calls and of every op reading or producing an expanded-shape tensor "
               f"(casts, copies, the backward's per-item GEMMs and sums over the batch) less their GEMMs as one "
               f"flattened GEMM each at the roof (the expanded tensors read or written once) = {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step)")
    return suggestion("flatten_bmm", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def flatten_bmm_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The expanded calls' other kernels gone, each GEMM × min(1, its flattened roof / its time)."""
    p, device = r.patterns, r.roofline.device
    if p is None or device is None or not rank_evidence(s, r) or len(p.expanded_part) != len(r.classification.table):
        return None
    dur = p.expanded_us
    roof = flat_roof(r, device)
    gemm = p.expanded_part == eb.PART_GEMM
    ratio = np.where(gemm & ~np.isnan(roof) & (dur > 0), np.minimum(np.nan_to_num(roof) / np.where(dur > 0, dur, 1.0), 1.0), 1.0)
    factor = np.where(p.expanded_part == eb.PART_OTHER, 0.0, ratio)
    return scale_rows(factor)
