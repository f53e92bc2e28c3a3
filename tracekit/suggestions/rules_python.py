"""Rules about host work on the training thread: Python or CPU preprocessing the GPU waits for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import cleanup, hostside, recompiles
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.trace.intervals import busy_in_windows, merge_intervals

PREPROCESS_MIN_PCT = 2.0  # the GPU must wait on host work for at least this share of the span
GAP_IDLE_SHARE = 0.5  # a host gap counts when the GPU idles through at least this share of it
NO_OP = "Python with no recorded op"
CLEANUP_SHARE = 0.5  # a host gap this much inside end-of-step cleanup is the cleanup rules'


def _cleanup_covers(r: RankAnalysis, gaps: pd.DataFrame) -> np.ndarray:
    """Per host gap: at least half of it lies in the end-of-step cleanup the cleanup rules price (a
    recorded garbage collection; without such records, the silence right before a cache release) or in
    Dynamo's frame compiles (the recompiles rule's)."""
    p = r.patterns
    out = np.zeros(len(gaps), dtype=bool)
    if p is None or not (len(p.cleanup_spans) or len(p.recompiles)) or not len(gaps):
        return out
    spans = p.cleanup_spans
    kinds = (cleanup.SPAN_GC,) if p.gc_recorded else (cleanup.SPAN_GC, cleanup.SPAN_SILENT)
    spans = spans[spans[cleanup.CS_WHAT].isin(kinds)]
    starts = np.concatenate((spans[cleanup.CS_TS].to_numpy(dtype=float), p.recompiles[recompiles.RC_TS].to_numpy(dtype=float)))
    ends = np.concatenate((spans[cleanup.CS_END].to_numpy(dtype=float), p.recompiles[recompiles.RC_END].to_numpy(dtype=float)))
    s, e = merge_intervals(starts, ends)
    a = gaps[hostside.HG_TS].to_numpy(dtype=float)
    length = gaps[hostside.HG_GAP_US].to_numpy(dtype=float)
    return busy_in_windows(s, e, a, a + length) >= CLEANUP_SHARE * length


def preprocess_off_thread(analysis: Analysis) -> Suggestion | None:
    """Host gaps on the training thread (≥ 1 ms with no launch or sync call, outside the DataLoader's
    windows, not overlapping autograd's backward or an optimizer step) through which the GPU idles:
    per step, the GPU idle inside them."""
    scope = Scope.of(analysis)
    rows, total, gap_total = [], 0.0, 0.0
    top = (-1.0, "", 0.0, 0.0)  # the step with the most GPU idle: (idle, what ran, recorded op time, longest gap)
    for r, table in rank_tables(analysis, "host_gaps"):
        t = table[in_headline(r, table[hostside.HG_STEP].to_numpy())]
        t = t[t[hostside.HG_GPU_IDLE_US].astype(float) >= GAP_IDLE_SHARE * t[hostside.HG_GAP_US].astype(float)]
        t = t[~t[hostside.HG_IN_ENGINE].astype(bool)]  # backward / optimizer.step: not the loop's own host work
        t = t[~_cleanup_covers(r, t)]  # a collection, the silence before empty_cache(), a recompile: their rules'
        spans = dict(zip(r.launch.steps["step"].tolist(), r.launch.steps["span_us"].tolist(), strict=True))
        for step, g in t.groupby(hostside.HG_STEP, sort=True):
            longest = g.loc[g[hostside.HG_GAP_US].astype(float).idxmax()]
            idle = float(g[hostside.HG_GPU_IDLE_US].sum())
            gap = float(g[hostside.HG_GAP_US].sum())
            total += idle
            gap_total += gap
            span = spans.get(step)
            ran_here = str(longest[hostside.HG_OPS]) or NO_OP
            if idle > top[0]:
                top = (idle, ran_here, float(longest[hostside.HG_OP_US]), float(longest[hostside.HG_GAP_US]))
            rows.append({"rank": r.rank, "step": int(step), "gaps": len(g), "gap_us": gap, "gpu_idle_us": idle,
                         "longest_us": float(longest[hostside.HG_GAP_US]),
                         "ran": ran_here,
                         "recorded_op_us": float(longest[hostside.HG_OP_US]),
                         "after_sync": str(longest[hostside.HG_AFTER_SYNC]) or "(none)",
                         "idle_pct": 100 * idle / span if span else None, "saving_us": idle})
    if not rows:
        return None
    saving = total / scope.ranks
    per_step = saving / scope.steps
    formula = ("Σ per step of the GPU idle inside the training thread's host gaps (≥ 1 ms with no launch "
               "or sync call, outside the DataLoader, the GPU idle through at least half of each) = "
               f"{fmt_us(saving)} of {fmt_us(gap_total / scope.ranks)} of host gaps: work overlapped with "
               "the GPU saves at most the GPU's wait, never more than the gap")
    # name the top recorded op only where recorded ops fill at least half of the gap, else it is Python
    ran = top[1].split(" ×")[0] if top[2] >= 0.5 * top[3] and top[1] != NO_OP else "Python"
    title = (f"Move host preprocessing off the training thread: the GPU idles {fmt_us(per_step)} per step "
             f"while the CPU runs {ran[:60]} between launches")
    return suggestion("preprocess_off_thread", title, saving, scope, formula, rows, min_pct=PREPROCESS_MIN_PCT)
