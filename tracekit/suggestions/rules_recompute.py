"""Rules about backward work done again: activation checkpointing's re-run forwards where the activations they would keep fit in memory; a shared network's backward run once per loss."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import backward_passes as bp
from tracekit.analyzers.detectors import recompute as rc
from tracekit.model.whatif import Transform, compose, scale_host, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    fmt_bytes,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural


def drop_checkpointing(analysis: Analysis) -> Suggestion | None:
    """Forward ops re-run inside backward nodes (patterns.recompute: `torch.utils.checkpoint`), in
    every headline step. Traced estimate: the re-runs' kernel time; the what-if also removes their
    calls and the dispatch before them (the block's forward run a second time on the host) and the
    host time of entering each checkpointed region in the forward (detectors/checkpoint_entry.py).
    Checkpointing trades that for memory: the extra activations are estimated from the re-run ops'
    inputs; where the trace recorded memory and they do not fit in the device's memory free at the
    peak on some rank, silent; where memory was not recorded the title says "if memory allows".
    Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    time_us = launches = regions = ops = act = 0.0
    names: list[str] = []
    headroom: list[float | None] = []
    for r, table in rank_tables(analysis, "recompute"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[rc.RC_STEP].to_numpy())]
        if len(t) < max(len(r.launch.steady_steps), 1):
            continue  # not in every headline step
        time_us += float(t[rc.RC_TIME_US].sum())
        launches += float(t[rc.RC_LAUNCHES].sum())
        regions += float(t[rc.RC_REGIONS].sum())
        ops += float(t[rc.RC_OPS].sum())
        rank_act = float(t[rc.RC_ACT_BYTES].max())
        act = max(act, rank_act)
        names.extend(n for n in str(t[rc.RC_NAMES].iloc[0]).split(", ") if n not in names)
        room = r.memory.headroom if r.memory is not None else None
        if room is not None and rank_act > room:
            return None  # the activations would not fit: checkpointing is what lets the step run
        headroom.append(room)
    if not regions:
        return None
    n = scope.steps * scope.ranks
    saving = time_us / scope.ranks
    known = bool(headroom) and all(h is not None for h in headroom)
    free = min((h for h in headroom if h is not None), default=0.0)
    memory = (f"the activations fit: ~{fmt_bytes(act)} more per step against {fmt_bytes(free)} free at the peak"
              if known else f"if memory allows (~{fmt_bytes(act)} more activations per step, from the re-run ops' "
                            "inputs; memory was not recorded)")
    formula = (f"the {plural(round(regions / n), 'checkpointed region')} per step re-run in backward "
               f"({ops / n:.0f} forward ops: {', '.join(names[:4])}): their kernels {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step), and their {launches / n:.0f} launches per step, "
               f"the host time between them and the forward's own entry into each region (RNG state, "
               f"saved-tensor hooks) go too; {memory}")
    short = (f"the activations fit (~{fmt_bytes(act)} more, {fmt_bytes(free)} free)" if known
             else f"if memory allows (~{fmt_bytes(act)} more activations)")
    title = (f"Drop activation checkpointing (or checkpoint fewer blocks), {short}: backward re-runs the forward "
             f"of {plural(round(regions / n), 'region')} per step ({launches / n:.0f} launches, "
             f"{fmt_us(saving / scope.steps)} of kernels)")
    rows = [{"regions_per_step": regions / n, "forward_ops_per_step": ops / n, "ops": ", ".join(names),
             "launches_per_step": launches / n, "kernel_us_per_step": saving / scope.steps,
             "activation_bytes": act, "memory_free_at_peak": free if known else None}]
    return suggestion("drop_checkpointing", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def single_backward(analysis: Analysis) -> Suggestion | None:
    """Training steps whose backward differentiates the weight layers about k times per forward
    (patterns.backward_passes: one `backward(retain_graph=True)` per loss): with the losses summed and
    one backward, the shared layers' backward runs once: traced, the step's backward GPU time × (1 − 1/k);
    the what-if scales each node's kernels by its kind's forward / backward calls (detectors/backward_passes.py)
    and their launching host work alike."""
    scope = Scope.of(analysis)
    rows, total = [], 0.0
    for r, table in rank_tables(analysis, "backward_passes"):
        t = table[in_headline(r, table[bp.BP_STEP].to_numpy())]
        if not len(t):
            continue
        passes = float(t[bp.BP_PASSES].median())
        gpu = float(t[bp.BP_GPU_US].sum())
        saving = gpu * (1.0 - 1.0 / passes)
        total += saving
        rows.append({"rank": r.rank, "steps": len(t), "forward_layers": int(t[bp.BP_FORWARD].median()),
                     "backward_nodes": int(t[bp.BP_BACKWARD].median()), "passes": passes,
                     "gpu_us_per_step": gpu / len(t), "saving_us": saving})
    if not rows:
        return None
    x = rows[0]
    title = (f"Sum the losses and call backward once: the weight layers' backward runs {x['passes']:.1f} times a "
             f"step ({x['backward_nodes']} backward nodes for {x['forward_layers']} forward calls of "
             "convolutions, linear layers and norms): one backward(retain_graph=True) per loss repeats the "
             "shared layers' backward")
    formula = (f"GPU time of the step's backward kernels ({fmt_us(x['gpu_us_per_step'])} per step) × "
               f"(1 − 1/{x['passes']:.2f}) = {fmt_us(total / scope.ranks / scope.steps)} per step")
    return suggestion("single_backward", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def single_backward_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Each repeated node's kernels × forward / backward calls of its kind, the step's other backward
    nodes' × 1/passes (patterns.backward_factor), and the host work that launches them × the mean of
    those factors (the extra passes' launch calls go with them)."""
    p = r.patterns
    factor = p.backward_factor if p is not None else None
    if factor is None or len(factor) != len(r.classification.table) or not (factor < 1).any():
        return None
    repeated = factor < 1
    return compose([scale_rows(factor), scale_host(repeated, float(np.mean(factor[repeated])))])
