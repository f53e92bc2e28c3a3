"""Rule about torch.compile graph breaks: the compiled regions per step, the breaks between them, what runs at each and what they cost."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import compiled as cd
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural

BREAKS_MIN_PCT = 2.0  # silent below this share of the step
NO_OP = "Python (no recorded op: a resumed frame)"


def graph_breaks(analysis: Analysis) -> Suggestion | None:
    """Graph breaks between compiled graphs in the headline steps: per break, the GPU idle from the
    end of the graph before it to the first GPU work after the next graph starts (the resume, the
    guard check, the eager code and any sync at the break, and the GPU pipeline drained across it)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, Any]] = []
    total, host_total, n_breaks = 0.0, 0.0, 0
    regions = lookups = 0.0
    recompiled: set[str] = set()
    for r, table in rank_tables(analysis, "graph_breaks"):
        per_step = r.patterns.compiled
        steps_seen = per_step[in_headline(r, per_step[cd.CR_STEP].to_numpy())]
        regions += float(steps_seen[cd.CR_REGIONS].sum())
        lookups += float(steps_seen[cd.CR_LOOKUPS].sum())
        for text in steps_seen[cd.CR_RECOMPILED].astype(str):
            recompiled.update(x for x in text.split(", ") if x)
        t = table[in_headline(r, table[cd.GB_STEP].to_numpy())]
        if not len(t):
            continue
        for ops, g in t.groupby(cd.GB_OPS, sort=False):
            idle = float(g[cd.GB_GPU_IDLE_US].astype(float).sum())
            host = float(g[cd.GB_HOST_US].astype(float).sum())
            total += idle
            host_total += host
            n_breaks += len(g)
            rows.append({"rank": r.rank, "at": str(ops) or NO_OP, "breaks_per_step": len(g) / scope.steps,
                         "host_us_per_break": host / len(g),
                         "sync_us_per_break": float(g[cd.GB_SYNC_US].astype(float).sum()) / len(g),
                         "guard_us_per_break": float(g[cd.GB_GUARD_US].astype(float).sum()) / len(g),
                         "gpu_idle_us_per_break": idle / len(g), "saving_us": idle})
    if not rows:
        return None
    rows.sort(key=lambda x: -float(x["saving_us"]))
    saving = total / scope.ranks
    per_rank_steps = scope.steps * scope.ranks
    formula = (f"Σ over {plural(n_breaks, 'graph break')} of the GPU idle from the end of the compiled graph before "
               f"the break to the first GPU work after the next one starts = {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step; the host time between the graphs: "
               f"{fmt_us(host_total / scope.ranks / scope.steps)} per step)")
    at = ", ".join(dict.fromkeys(str(x["at"]) for x in rows))[:120]
    title = (f"Remove torch.compile graph breaks: {plural(n_breaks / per_rank_steps, 'break')} per step between "
             f"{regions / per_rank_steps:.0f} compiled regions ({lookups / per_rank_steps:.0f} cache lookups), "
             f"at {at}")
    if recompiled:
        title += f"; recompiled frames {', '.join(sorted(recompiled))[:60]}"
    return suggestion("graph_breaks", title, saving, scope, formula, rows, min_pct=BREAKS_MIN_PCT)
