"""Rules about caches grown by torch.cat: preallocate the KV cache and write each new position in place."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import cache_growth as cg
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural


def preallocate_kv_cache(analysis: Analysis) -> Suggestion | None:
    """torch.cat growing a cache a few positions per call (patterns.cache_growth): each call copies the
    whole cache. Saving: the cats' copy kernels' time less what an in-place write of the new positions
    into a buffer allocated once still moves (kernel time × n / (L + n) per call, the detector's kept_us).
    Silent below SILENT_BELOW_PCT of the step."""
    scope = Scope.of(analysis)
    groups: dict[tuple[int, str, int, int], _Group] = {}
    for r, table in rank_tables(analysis, "cache_growth"):
        if not len(table):
            continue
        t = table[in_headline(r, table[cg.CG_STEP].to_numpy())]
        for row in t.to_dict("records"):
            key = (r.rank, str(row[cg.CG_SHAPE]), int(row[cg.CG_DIM]), int(row[cg.CG_NEW]))
            groups.setdefault(key, _Group(kernel=str(row[cg.CG_KERNEL]))).add(row)
    if not groups:
        return None
    rows = [{"rank": rank, "op": "aten::cat", "shape": shape, "dim": dim, "new_positions": new,
             "lengths": f"{g.min_len}–{g.max_len}", "calls_per_step": g.calls / scope.steps, "kernel": g.kernel,
             "kernel_us_per_step": g.time_us / scope.steps, "in_place_us_per_step": g.kept_us / scope.steps,
             "saving_us_per_step": (g.time_us - g.kept_us) / scope.steps, "saving_us": g.time_us - g.kept_us}
            for (rank, shape, dim, new), g in groups.items()]
    rows.sort(key=lambda x: -float(str(x["saving_us"])))
    saving = sum(g.time_us - g.kept_us for g in groups.values()) / scope.ranks
    calls = sum(g.calls for g in groups.values()) / scope.steps / scope.ranks
    top = max(groups.items(), key=lambda kv: kv[1].time_us - kv[1].kept_us)
    (_, shape, _, new), g = top
    formula = (f"Σ over {plural(len(rows), 'cache shape')} of the cats' copy kernels' time − what writing the "
               f"new positions in place moves (kernel time × n / (L + n) per call) = {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step)")
    title = (f"Preallocate the KV cache: {plural(calls, 'torch.cat')} per step copy the whole cache "
             f"{shape} (L {g.min_len}–{g.max_len}) to append {plural(new, 'position')}")
    return suggestion("preallocate_kv_cache", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


@dataclass
class _Group:
    """One cache shape's growing cats over the headline steps (rows of patterns.cache_growth added up)."""

    kernel: str
    calls: int = 0
    time_us: float = 0.0
    kept_us: float = 0.0
    min_len: int = 1 << 62
    max_len: int = 0

    def add(self, row: dict[str, object]) -> None:
        self.calls += int(str(row[cg.CG_CALLS]))
        self.time_us += float(str(row[cg.CG_TIME_US]))
        self.kept_us += float(str(row[cg.CG_KEPT_US]))
        self.min_len = min(self.min_len, int(str(row[cg.CG_MIN_LEN])))
        self.max_len = max(self.max_len, int(str(row[cg.CG_MAX_LEN])))
