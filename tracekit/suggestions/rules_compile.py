"""Rules about torch.compile: graph breaks (the compiled regions per step, the breaks between them, what runs at each and what they cost), recompiles inside the steps, and inputs CUDA graph trees copy into a graph at every replay."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import compiled as cd
from tracekit.analyzers.detectors import graph_inputs as gi
from tracekit.analyzers.detectors import recompiles as rc
from tracekit.model.whatif import Transform, remove_calls
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import fuse_elementwise
from tracekit.suggestions.whatif_evidence import rank_evidence
from tracekit.units import plural

BREAKS_MIN_PCT = 2.0  # silent below this share of the step
RECUR_SHARE = 0.5  # compiles must recur in this share of the headline steps (one is a late warm-up)
NO_OP = "Python (no recorded op: a resumed frame)"
# an input copied into a graph at every call is a candidate for a static address when it is large: a state
# or a token that changes every call is small (heldout5 compiled_rollout: 128 copies a step, ~8 µs each, of
# the rollout state), a cache, an encoder's output or a mask is not (heldout24 meeting_asr: 78 MB a copy)
MIN_COPY_BYTES = float(1 << 20)


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


def _eager_fallback(analysis: Analysis) -> Suggestion | None:
    """A compiled function Dynamo gave up on: in every headline step its cache is looked up
    (patterns.compiled: lookups) and no compiled region runs, so the function runs eagerly (after
    `recompile_limit` versions whose guards failed, e.g. on a Python attribute changed in forward:
    heldout15 dino_counter_recompile, 8 lookups and no region a step). Saving: the steps compiled,
    fuse_elementwise's estimate of them (its what-if: whatif_debug.no_recompiles)."""
    rows: list[dict[str, Any]] = []
    for r, table in rank_tables(analysis, "compiled"):
        t = table[in_headline(r, table[cd.CR_STEP].to_numpy())]
        n = len(r.launch.steady_steps)
        if not n or t[cd.CR_STEP].nunique() < n or (t[cd.CR_REGIONS] > 0).any() or not (t[cd.CR_LOOKUPS] > 0).all():
            continue
        rows.append({"rank": r.rank, "mode": "eager_fallback", "lookups_per_step": float(t[cd.CR_LOOKUPS].sum()) / n,
                     "compiled_regions_per_step": 0})
    fused = fuse_elementwise(analysis) if rows else None
    if fused is None:
        return None
    scope = Scope.of(analysis)
    per = float(rows[0]["lookups_per_step"])
    title = (f"torch.compile runs this model eagerly: {per:.0f} cache lookup{'' if round(per) == 1 else 's'} per step and "
             "no compiled region, so Dynamo gave up on the frame (recompile_limit reached after guards failed on every call, "
             "e.g. an integer attribute changed in forward, or a compile error suppressed); keep per-call Python state "
             "out of the compiled function (TORCH_LOGS=recompiles names the guard)")
    formula = ("the steps as compiled: fuse_elementwise's estimate of them (" + fused.formula + ")")
    return suggestion("recompiles", title, fused.saving_us, scope, formula, rows)


def recompiles(analysis: Analysis) -> Suggestion | None:
    """Dynamo compiling frames inside most headline steps (patterns.recompiles): per step, the compile
    spans' host time, which the step waits for (nothing is launched while a frame compiles). Without
    any, a compiled function that runs eagerly in every step (_eager_fallback)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, Any]] = []
    total, frames, with_steps, steady = 0.0, 0, 0, 0
    for r, table in rank_tables(analysis, "recompiles"):
        t = table[in_headline(r, table[rc.RC_STEP].to_numpy())]
        n = len(r.launch.steady_steps)
        if not len(t) or t[rc.RC_STEP].nunique() < max(RECUR_SHARE * n, 1):
            continue
        with_steps, steady = with_steps + int(t[rc.RC_STEP].nunique()), steady + n
        for step, g in t.groupby(rc.RC_STEP, sort=True):
            us = float(g[rc.RC_US].sum())
            total += us
            frames += int(g[rc.RC_FRAMES].sum())
            rows.append({"rank": r.rank, "step": int(step), "frame_compiles": int(g[rc.RC_FRAMES].sum()),
                         "compile_us": us, "saving_us": us})
    if not rows:
        return _eager_fallback(analysis)
    saving = total / scope.ranks
    per = frames / (scope.steps * scope.ranks)
    title = (f"torch.compile recompiles in {with_steps} of {steady} steps: {per:.0f} frame "
             f"compile{'' if round(per) == 1 else 's'} per step take {fmt_us(saving / scope.steps)} "
             "(new input shapes under static shapes, or a guard that fails)")
    formula = ("Σ per step of Dynamo's frame compiles recorded inside the step (entire_frame_compile / "
               f"_compile.compile_inner, merged per thread) = {fmt_us(saving)}: the step launches nothing "
               "while a frame compiles. A profiled run can compile faster than an unprofiled one that "
               "found Inductor's caches cold: the saving is at least this")
    return suggestion("recompiles", title, saving, scope, formula, rows)


def static_graph_inputs(analysis: Analysis) -> Suggestion | None:
    """Inputs CUDA graph trees copy into a graph's buffers at every replay (patterns.graph_inputs), in every
    headline step: inputs that keep their values between calls, kept at a static address, are not copied.
    The saving is the copies' GPU time. Only copies of MIN_COPY_BYTES or more on average (their recorded
    bytes; silent where none are recorded). Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    head: tuple[float, float, float] | None = None  # copies, GB, µs per step
    for r, t, n in every_step_tables(analysis, "graph_inputs", gi.GI_STEP):
        spent = float(t[gi.GI_US].sum())
        moved = float(t[gi.GI_BYTES].sum(min_count=1)) if t[gi.GI_BYTES].notna().any() else 0.0
        if moved < MIN_COPY_BYTES * float(t[gi.GI_COPIES].sum()):
            continue
        total += spent
        rows.append({"rank": r.rank, "copy_calls_per_step": float(t[gi.GI_CALLS].sum()) / n,
                     "copies_per_step": float(t[gi.GI_COPIES].sum()) / n, "bytes_per_step": moved / n,
                     "copy_us_per_step": spent / n})
        head = head or (float(t[gi.GI_COPIES].sum()) / n, moved / n / 1e9, spent / n)
    if head is None:
        return None
    copies, gb, per_step = head
    saving = total / scope.ranks
    moved_text = f", {gb:.2f} GB" if gb else ""
    title = (f"Keep the compiled graph's unchanging inputs at a static address (torch._dynamo.mark_static_address, or "
             f"compute them inside the graph): CUDA graph trees copy {plural(round(copies), 'input')} per step into the "
             f"graph before each replay ({fmt_us(per_step)}{moved_text} per step)")
    formula = (f"the copies' GPU time, every input copy of `_foreach_copy_` inside the compiled regions = "
               f"{fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    return suggestion("static_graph_inputs", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def static_graph_inputs_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The input copies' calls gone with what they launched (remove_calls over patterns.graph_input_calls)."""
    p = r.patterns
    if p is None or not rank_evidence(s, r) or not len(p.graph_input_calls) or not p.graph_input_calls.any():
        return None
    return remove_calls(p.graph_input_calls)
