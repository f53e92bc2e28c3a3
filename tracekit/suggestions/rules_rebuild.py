"""Rules about host work redone at every call that doing it once removes: Triton kernel objects made per call, cuDNN attention plans built per new sequence length."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import attention_plans as ap
from tracekit.analyzers.detectors import grad_recording as gr
from tracekit.analyzers.detectors import triton_rebuild as tr
from tracekit.model.outlook import Transform
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_recompute import cut_entries
from tracekit.trace.intervals import busy_in_windows


def define_kernel_once(analysis: Analysis) -> Suggestion | None:
    """User Triton kernels made anew at each call (patterns.triton_rebuild), in every headline step:
    the host gap before each launch call less a module-level kernel's (triton_rebuild.KEEP_US). The
    what-if shortens those gaps by as much. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "triton_rebuild", tr.TR_STEP):
        host = float(t[tr.TR_HOST_US].sum())
        total += host
        top = t.groupby([tr.TR_KERNEL, tr.TR_SITE], sort=False)[tr.TR_HOST_US].sum().sort_values(ascending=False)
        kernel, site = top.index[0]
        mine = t[(t[tr.TR_KERNEL] == kernel) & (t[tr.TR_SITE] == site)]
        rows.append({"rank": r.rank, "kernel": kernel, "defined_at": site,
                     "launches_per_step": float(mine[tr.TR_LAUNCHES].sum()) / n,
                     "kernel_objects_per_step": float(mine[tr.TR_OBJECTS].sum()) / n,
                     "kernels_rebuilt": len(top), "host_us_per_step": host / n, "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    title = (f"Define the Triton kernel once: {x['kernel']} ({x['defined_at']}) is a new kernel object at each of its "
             f"{round(float(str(x['launches_per_step'])))} launches per step, {fmt_us(float(str(x['host_us_per_step'])))} "
             "of host time per step in Triton's source hashing, cache lookup and module load; put @triton.jit on a "
             "module-level function (or cache the factory's kernel)")
    formula = (f"Σ per launch of a kernel object made for it of (the host gap before its launch call − "
               f"{fmt_us(tr.KEEP_US)}, a module-level kernel's launch path), per step")
    return suggestion("define_kernel_once", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def attention_plans(analysis: Analysis) -> Suggestion | None:
    """cuDNN attention plans built at new shapes (patterns.attention_plans), in every headline step: the
    builds' host time above the op's median call before their launch. The what-if shortens those gaps
    by as much. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "attention_plans", ap.AP_STEP):
        host = float(t[ap.AP_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "op": str(t[ap.AP_OP].iat[0]), "builds_per_step": float(t[ap.AP_BUILDS].sum()) / n,
                     "calls_per_step": float(t[ap.AP_CALLS].sum()) / n, "median_call_us": float(t[ap.AP_MEDIAN_US].iat[0]),
                     "shapes": str(t[ap.AP_SHAPES].iat[0]), "host_us_per_step": host / n, "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    builds = float(str(x["builds_per_step"]))
    each = (f"{round(builds)} new sequence lengths per step, {fmt_us(float(str(x['host_us_per_step'])) / max(builds, 1.0))} "
            f"of host time each against {fmt_us(float(str(x['median_call_us'])))} for a known shape")
    title = (f"Use an SDPA backend without per-shape plans: cuDNN attention builds a new plan at {each} (sdpa_kernel("
             "[SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), or lengths padded to a few buckets)")
    if any(_in_compiled(r) for r in analysis.ranks):
        title = (f"Pad the inputs to a few shapes: inside the compiled model cuDNN attention builds a new plan at {each}, "
                 "and each new shape is compiled or graphed again (or an SDPA backend without per-shape plans: "
                 "sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]))")
    formula = ("Σ per cuDNN attention call at a shape first seen in the trace that took ≥ "
               f"{fmt_us(ap.SLOW_US)} and ≥ {ap.SLOW_FACTOR:.0f}× the op's median of min(the host gap before its "
               "launch, its time above that median), per step")
    return suggestion("attention_plans", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def _in_compiled(r: RankAnalysis) -> bool:
    """Most of the rank's plan-building host time lies inside torch.compile'd functions
    (patterns.compiled_spans): heldout22 smiles_cudagraph_every_shape, a reduce-overhead model fed a new
    shape per call, where padding to buckets (898 ms measured) beats the plans' own 743 ms."""
    p = r.patterns
    if p is None or not len(p.compiled_spans) or len(p.triton_rebuild) or not len(p.rebuild_spans):
        return False  # rebuild_spans holds the plans' spans alone when no Triton kernel is rebuilt
    spans = p.rebuild_spans
    inside = busy_in_windows(p.compiled_spans[:, 0], p.compiled_spans[:, 1], spans[:, 0], spans[:, 1])
    return float(inside.sum()) >= 0.5 * float((spans[:, 1] - spans[:, 0]).sum())


def _cut(field: str) -> Callable[[Suggestion, RankAnalysis, float], Transform | None]:
    """The what-if of a rule whose Patterns.`field` holds host time to cut before runtime calls."""

    def transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
        cut = getattr(r.patterns, field, None) if r.patterns is not None else None
        if not isinstance(cut, np.ndarray) or not (cut > 0).any():
            return None
        return cut_entries(cut)

    return transform


def inference_mode_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The projected host gaps less the graph nodes' recording at its unprofiled cost
    (grad_recording.NODE_BARE_US a node where the detector charged NODE_US, capped at the traced gap)."""
    cut = r.patterns.grad_recording_cut_us if r.patterns is not None else None
    if not isinstance(cut, np.ndarray) or not (cut > 0).any():
        return None
    return cut_entries(cut, scale=gr.NODE_BARE_US / gr.NODE_US)


define_kernel_once_transform = _cut("triton_rebuild_cut_us")  # the launches' host gaps less the rebuild
attention_plans_transform = _cut("attention_plan_cut_us")  # the builds' host gaps less the plan
