"""Rule about kernels launched one piece at a time with grids far smaller than the GPU: one launch over all the pieces."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import underfilled as uf
from tracekit.model.outlook import Transform
from tracekit.model.whatif import fuse_region
from tracekit.suggestions.common import Scope, fmt_us, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import BARE_LAUNCH_US
from tracekit.units import plural


def merge_launches(analysis: Analysis) -> Suggestion | None:
    """Runs of ≥ MIN_RUN back-to-back launches of one kernel whose grid fills ≤ MAX_FILL of the SMs
    (patterns.underfilled): their kernel time − one launch per run over all the pieces' blocks,
    ⌈launches × blocks / SMs⌉ waves of the median kernel time (each block keeps its work)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, Any]] = []
    total = 0.0
    for r, table in rank_tables(analysis, "underfilled"):
        sms = r.patterns.num_sms if r.patterns is not None else None
        if not sms:
            continue
        for rec in table.to_dict("records"):
            saving = float(rec[uf.UF_BUSY_US]) - float(rec[uf.UF_MERGED_US])
            if saving <= 0:
                continue
            total += saving
            rows.append({"rank": r.rank, "kernel": str(rec[uf.UF_KERNEL]), "blocks_per_launch": rec[uf.UF_BLOCKS],
                         "sms": sms, "fill_pct": 100.0 * float(rec[uf.UF_BLOCKS]) / sms,
                         "launches_per_step": float(rec[uf.UF_KERNELS]) / scope.steps,
                         "runs_per_step": float(rec[uf.UF_RUNS]) / scope.steps, "kernel_us": rec[uf.UF_KERNEL_US],
                         "time_us_per_step": float(rec[uf.UF_BUSY_US]) / scope.steps,
                         "merged_us_per_step": float(rec[uf.UF_MERGED_US]) / scope.steps, "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    top = rows[0]
    formula = (f"Σ over {plural(len(rows), 'kernel')} launched in runs of ≥ {uf.MIN_RUN} with ≤ {100 * uf.MAX_FILL:.0f} % "
               f"of the SMs' worth of blocks: their kernel time − one launch per run over all its blocks, "
               f"⌈launches × blocks / SMs⌉ waves × the median kernel time; {str(top['kernel'])[:60]}: "
               f"{fmt_us(top['time_us_per_step'])} − {fmt_us(top['merged_us_per_step'])} per step "
               f"({top['launches_per_step']:.0f} launches × {top['blocks_per_launch']:.0f} blocks on {top['sms']} SMs) = "
               f"{fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    title = (f"Launch {str(top['kernel'])[:60]} once over all the pieces: each step launches it "
             f"{top['launches_per_step']:.0f} times back to back with {top['blocks_per_launch']:.0f} thread blocks, "
             f"{top['fill_pct']:.0f} % of the {top['sms']} SMs, so most of the GPU idles while it runs")
    return suggestion("merge_launches", title, saving, scope, formula, rows)


def merge_launches_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The under-filled runs as one launch each: their kernels × merged / now time (the detector's
    waves), the calls that launch them and the host gaps between them gone but one launch per run."""
    p = r.patterns
    if p is None or len(p.in_underfilled) != len(r.classification.table) or not p.in_underfilled.any():
        return None
    table = p.underfilled
    now = float(table[uf.UF_BUSY_US].sum())
    merged = float(table[uf.UF_MERGED_US].sum())
    if now <= 0:
        return None
    launches = max(round(float(table[uf.UF_RUNS].sum()) / max(r.launch.totals.steps, 1)), 1)
    return fuse_region(p.in_underfilled, min(merged / now, 1.0), launches, BARE_LAUNCH_US)
