"""Savings from the execution model: each rule's change as a what-if replay of the projected unprofiled steps, and the top changes combined."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import compiled, sequences, triton_launch
from tracekit.analyzers.kernels import (
    ATTENTION,
    COMMUNICATION,
    COPY,
    ELEMENTWISE,
    GEMM,
    LIBRARY,
    MEMCPY,
    NORMALIZATION,
    SOFTMAX,
)
from tracekit.model.outlook import RankModel, Transform
from tracekit.model.whatif import (
    Breaks,
    compose,
    cuda_graph,
    fuse_region,
    merge_breaks,
    no_syncs,
    remove_calls,
    scale_nodes,
    scale_step,
    shorter_longest_gap,
    unblock_copies,
)
from tracekit.model.whatif_runs import compile_runs, fuse_runs
from tracekit.suggestions.common import MIN_SAVING_US, SILENT_BELOW_PCT
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_decode import DECODE_BATCH
from tracekit.suggestions.rules_launch import reduce_overhead_calls
from tracekit.suggestions.rules_loader import reuse_transform
from tracekit.suggestions.whatif_attention import causal_mask_transform
from tracekit.suggestions.whatif_beside import BESIDE_TRANSFORMS
from tracekit.suggestions.whatif_convert import convert_once_transform
from tracekit.suggestions.whatif_debug import TRANSFORMS as DEBUG_TRANSFORMS
from tracekit.suggestions.whatif_evidence import (
    BARE_LAUNCH_US,
    TransformFor,
    class_rows,
    evidence_number,
    loop_calls,
    operand_casts,
    rank_evidence,
)
from tracekit.suggestions.whatif_host import preprocess_transform
from tracekit.suggestions.whatif_layout import channels_last_transform
from tracekit.suggestions.whatif_loops import (
    batch_bmm_transform,
    batch_requests_transform,
    batch_samples_transform,
    concat_embeddings_transform,
    cudnn_rnn_transform,
    foreach_transform,
    larger_batch_transform,
    preallocate_transform,
    use_kv_cache_transform,
)
from tracekit.suggestions.whatif_offload import offload_transform
from tracekit.suggestions.whatif_recompute import drop_checkpointing_transform
from tracekit.units import fmt_us

COMBINED_TOP = 3  # the combined what-if replays the top suggestions together, at most this many
FUSED_TENSORS_PER_LAUNCH = 36  # suggestions/rules_optimizer.py TENSORS_PER_LAUNCH
# Suggestion.whatif of a change the model cannot replay (its saving is the traced estimate, capped)
NO_REPLAY = "traced estimate (no what-if replay of this change), at most the projected step"

# Kernel classes whose time a GPU-side change shortens (the rule's traced saving per step, spread
# over them in proportion): the part of the step each rule's target names (suggestions/rules.py).
GPU_CLASSES: dict[str, tuple[str, ...]] = {
    "align_dims": (GEMM,),
    "overlap_comm": (COMMUNICATION,),
}

# use_sdpa's unfused chains: the classes its replay shortens (the chain's scale/mask/transpose kernels too)
SDPA_CLASSES = (GEMM, SOFTMAX, ATTENTION, ELEMENTWISE, COPY)

# The kernel classes Inductor fuses into its generated kernels: pointwise ops and norms and the dtype
# casts between them (autocast's _to_copy, .contiguous(): class copy; not cuDNN's layout transposes,
# which belong to the convolution), and torch's reduce kernels (patterns.reduce_kernels: mean, var,
# sum, fused with their pointwise prologue and epilogue). They no longer split the runs that
# compile_runs fuses (H200: ho_norm_gelu_chain 5.24 → 8.88 ms predicted against 9.26 measured,
# bare/train_compile_eager 0.77 → 3.52 ms against 3.78). Generated (Inductor, Triton) kernels are
# fused already and stay out. A cast joins only between two fusable kernels (operand_casts): with
# every cast joining, compile came first on 2 of the second held-out set's autocast steps where the
# measured-fastest fix was another (docs/validation.md, "Second held-out set"); bare/train_compile_eager
# falls back to 1.13 ms predicted with it.
COMPILE_FUSES = (ELEMENTWISE, NORMALIZATION, COPY)

def _no_rows(r: RankAnalysis) -> np.ndarray:
    return np.zeros(len(r.classification.table), dtype=bool)


def _graph_excluded(r: RankAnalysis) -> np.ndarray:
    """Kernels a graph of the model leaves alone: the optimizer's (an Optimizer.step range's or a
    hand-written optimizer loop's) and those already replayed from a graph."""
    out = _no_rows(r)
    patterns = r.patterns
    if patterns is not None and len(patterns.in_optimizer) == len(out):
        out |= patterns.in_optimizer
    if patterns is not None and len(patterns.in_optimizer_loop) == len(out):
        out |= patterns.in_optimizer_loop  # a hand-written optimizer loop: outside the model's graph too
    if r.graphs is not None and len(r.graphs.replayed) == len(out):
        out |= r.graphs.replayed
    return out


def _breaks(r: RankAnalysis) -> Breaks | None:
    """The rank's torch.compile graph breaks (patterns.graph_breaks), None when it has none: each from
    the last launch of the graph before it to the first launch of the graph after it (what merging
    the two removes: graph A's epilogue, the break, the guard check, graph B's prologue)."""
    p = r.patterns
    t = p.graph_breaks if p is not None else None
    if t is None or not len(t) or not len(p.break_thread):
        return None
    back = p.backward_breaks  # the stretches between their backward graphs merge too
    return Breaks(p.break_thread,
                  np.concatenate([t[compiled.GB_CPU_START].to_numpy(dtype=float), back[compiled.BB_CPU_START].to_numpy(dtype=float)]),
                  np.concatenate([t[compiled.GB_CPU_END].to_numpy(dtype=float), back[compiled.BB_CPU_END].to_numpy(dtype=float)]))


def _cuda_graphs(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    return cuda_graph(_graph_excluded(r), _breaks(r), reduce_overhead_calls(r))


def _avoid_sync(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The syncs gone but a per-tensor loop's (foreach_loops'), the value checks' (drop_checks') and
    the calibrators' (calibration_off'); a small value read's own host work (sync_reads.py: the read
    op and the stack gathering for it) goes with its sync, unless another rule's change owns it."""
    kept = loop_calls(r)
    p = r.patterns
    for checks in ((p.value_check_calls, p.calibration_calls) if p is not None else ()):
        if len(checks) and checks.any():
            kept = checks if kept is None else kept | checks
    group = p.sync_read_group if p is not None else np.zeros(0, dtype=np.int64)
    if not len(group) or not (group >= 0).any():
        return no_syncs(kept)
    owned = np.zeros(len(group), dtype=bool) if kept is None else kept.copy()
    for other in (p.item_read_calls, p.anomaly_calls):
        if len(other) == len(owned):
            owned |= other
    reads = (group >= 0) & ~owned[np.maximum(group, 0)]
    return compose([no_syncs(kept), remove_calls(reads)]) if reads.any() else no_syncs(kept)


def _dataloader(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    return shorter_longest_gap(per_step)


def _fused_optimizer(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    rows = rank_evidence(s, r)
    if not rows or r.patterns is None or not len(r.patterns.in_optimizer):
        return None
    gpu = sum(evidence_number(e, "gpu_us") for e in rows)
    fused = sum(evidence_number(e, "fused_us") for e in rows)
    tensors = [evidence_number(e, "tensors") for e in rows if evidence_number(e, "tensors") > 0]
    launches = max(math.ceil(max(tensors) / FUSED_TENSORS_PER_LAUNCH), 1) if tensors else 1
    factor = min(fused / gpu, 1.0) if gpu > 0 else 1.0
    return fuse_region(r.patterns.in_optimizer, factor, launches, BARE_LAUNCH_US)


def _pinned(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    rows = rank_evidence(s, r)
    copy = sum(evidence_number(e, "copy_us") for e in rows)
    pinned = sum(evidence_number(e, "pinned_copy_us") for e in rows)
    syncs = r.patterns.copy_syncs if r.patterns is not None else None
    return unblock_copies(class_rows(r, (MEMCPY,)), min(pinned / copy, 1.0) if copy > 0 else 1.0, BARE_LAUNCH_US, syncs)


def _lower_precision(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The classes of the kernels the suggestion lowers (GEMMs; convolutions, norms, activations), faster by its saving."""
    classes = tuple(sorted({str(e["class"]) for e in s.evidence if e.get("class")})) or (GEMM,)
    return scale_nodes(class_rows(r, classes), per_step)


def _pattern_rows(r: RankAnalysis, name: str, per_step: float) -> Transform | None:
    """The GPU rows of the Patterns mask `name`, faster by the suggestion's saving per step."""
    mask = getattr(r.patterns, name, None) if r.patterns is not None else None
    if mask is None or len(mask) != len(r.classification.table):
        return None
    return scale_nodes(mask, per_step)


def _batch_decode(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The step's work shared by the batch the suggestion assumes (its evidence's `batch`)."""
    batch = max((evidence_number(e, "batch") for e in rank_evidence(s, r)), default=0.0) or float(DECODE_BATCH)
    return scale_step(1.0 / batch)


def _quantize(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    return scale_nodes(class_rows(r, (GEMM,)), per_step)


def _fused_llm(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Each chain segment one fused kernel: its GPU nodes × fused / unfused time, and its launches
    (with the host gaps between them: the eager ops' Python and dispatch) folded into one per segment."""
    mask = r.patterns.in_llm_chain if r.patterns is not None else None
    rows = rank_evidence(s, r)
    if mask is None or len(mask) != len(r.classification.table) or not rows:
        return None
    now = sum(evidence_number(e, "time_us") for e in rows)
    fused = sum(evidence_number(e, "fused_us") for e in rows)
    return fuse_runs(mask, min(fused / now, 1.0) if now > 0 else 1.0, BARE_LAUNCH_US)


def _graph_breaks(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    breaks = _breaks(r)
    return merge_breaks(breaks) if breaks is not None else None


def _triton_config(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    p = r.patterns
    if p is None or not len(p.triton_launches) or not len(p.triton_rows):
        return None
    flagged = {(e.get("kernel"), e.get("grid"), e.get("constexprs")) for e in rank_evidence(s, r)}
    t = p.triton_launches
    keys = zip(t[triton_launch.TL_KERNEL], t[triton_launch.TL_GRID], t[triton_launch.TL_CONSTEXPRS], strict=True)
    picked = [i for i, key in enumerate(keys) if key in flagged]
    return scale_nodes(np.isin(p.triton_rows, picked), per_step) if picked else None


def _fuse_elementwise(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """torch.compile fuses each run of elementwise/normalization/cast/reduce launches (COMPILE_FUSES,
    patterns.reduce_kernels) into one kernel, called by its wrapper without the eager ops' dispatch
    (model/whatif_runs.py compile_runs); the optimizer's kernels (compiling the model leaves opt.step()
    eager: fused_optimizer's change), those already replayed from a graph, generated (Inductor,
    Triton) kernels, cuDNN's layout transposes and an SDPA fallback's kernels are not part of any run;
    in training a run with a norm takes its longest member's time (compile_runs' `bounded`); a cross-entropy
    chain the rule counts (evidence `chain`) joins the runs with its log-softmax kernels."""
    libraries = r.classification.table[LIBRARY].to_numpy(dtype=object)
    keep = class_rows(r, COMPILE_FUSES) & ~np.isin(libraries, list(sequences.PREFUSED_LIBRARIES))  # generated: fused already
    p = r.patterns
    if p is not None and len(p.layout_transposes) == len(keep):
        keep &= ~p.layout_transposes
    if p is not None and len(p.reduce_kernels) == len(keep):
        keep |= p.reduce_kernels
    if p is not None and len(p.in_sdpa_fallback) == len(keep):
        keep &= ~p.in_sdpa_fallback  # an SDPA fallback's kernels: use_sdpa's change
    loss = s is not None and any(e.get("chain") for e in rank_evidence(s, r))
    if p is not None and loss and len(p.in_llm_chain) == len(keep):
        keep |= p.in_llm_chain  # a cross-entropy chain the rule counts (rules_llm.loss_chains): its softmax kernels too
    keep &= ~_graph_excluded(r)
    bounded = class_rows(r, (NORMALIZATION,)) if p is not None and p.training else None  # norms with statistics
    return compile_runs(keep & ~operand_casts(r, keep), BARE_LAUNCH_US, bounded)


def _use_sdpa(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """SDPA fallbacks (evidence mode "fallback"): their forward and backward kernels
    (patterns.in_sdpa_fallback) faster by their share of the saving; unfused attention: its forward
    and backward kernels (patterns.in_attention; without that mask the kernels of SDPA_CLASSES
    outside the fallbacks) faster by the rest."""
    rows = rank_evidence(s, r)
    total = sum(evidence_number(e, "saving_us") for e in rows)
    fell = sum(evidence_number(e, "saving_us") for e in rows if e.get("mode") == "fallback")
    share = fell / total if total > 0 else 0.0
    mask = r.patterns.in_sdpa_fallback if r.patterns is not None else None
    if mask is None or len(mask) != len(r.classification.table):
        mask, share = _no_rows(r), 0.0
    parts = [scale_nodes(mask, per_step * share)] if share > 0 else []
    if share < 1.0:
        unfused = r.patterns.in_attention if r.patterns is not None else None
        if unfused is None or len(unfused) != len(mask) or not unfused.any():
            unfused = class_rows(r, SDPA_CLASSES)
        parts.append(scale_nodes(unfused & ~mask, per_step * (1.0 - share)))
    return compose(parts) if len(parts) > 1 else parts[0]


def _gpu_side(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    classes = GPU_CLASSES.get(s.id)
    return scale_nodes(class_rows(r, classes), per_step) if classes else None


TRANSFORMS: dict[str, TransformFor] = {
    "cuda_graphs": _cuda_graphs,
    "avoid_sync": _avoid_sync,
    "dataloader_workers": _dataloader,
    "preprocess_off_thread": preprocess_transform,  # dataloader_workers' change; results copied back: those copies gone
    "reuse_dataloader": reuse_transform,  # the new iterator's start-up, wait and shutdown gone from that gap
    "fused_optimizer": _fused_optimizer,
    "optimizer_on_gpu": offload_transform,  # the host step and its copies gone, a fused AdamW instead
    "pinned_memory": _pinned,
    "batch_bmm": batch_bmm_transform,
    "lower_precision": _lower_precision,
    "channels_last": channels_last_transform,
    "batch_decode": _batch_decode,
    "batch_requests": batch_requests_transform,
    "batch_samples": batch_samples_transform,
    "foreach_loops": foreach_transform,
    "larger_batch": larger_batch_transform,
    "quantize_weights": _quantize,
    "fused_llm_kernels": _fused_llm,
    "fuse_elementwise": _fuse_elementwise,
    "graph_breaks": _graph_breaks,
    "triton_config": _triton_config,
    "cudnn_rnn": cudnn_rnn_transform,
    "concat_embeddings": concat_embeddings_transform,
    "use_sdpa": _use_sdpa,
    "causal_mask": causal_mask_transform,  # the attention kernels, and the mask built every step gone
    "preallocate_kv_cache": preallocate_transform,
    "use_kv_cache": use_kv_cache_transform,  # the forwards after the prefill at one position each
    "convert_weights_once": convert_once_transform,  # the conversions' calls and kernels gone
    "drop_checkpointing": drop_checkpointing_transform,  # the forwards re-run in backward gone
    **{rule: _gpu_side for rule in GPU_CLASSES},
    **DEBUG_TRANSFORMS,
    **BESIDE_TRANSFORMS,
}


def _transforms(s: Suggestion, analysis: Analysis, models: dict[int, RankModel]) -> dict[int, Transform]:
    """The change of `s` on each rank the model projects."""
    make = TRANSFORMS.get(s.id)
    if make is None:
        return {}
    per_step = s.per_step_us or 0.0
    out: dict[int, Transform] = {}
    for r in analysis.ranks:
        model = models.get(r.rank)
        if model is None or not model.trusted:
            continue
        t = make(s, r, per_step)
        if t is not None:
            out[r.rank] = t
    return out


def _saving(analysis: Analysis, models: dict[int, RankModel], transforms: dict[int, Transform],
            traced_per_rank: float) -> tuple[float, float] | None:
    """(mean saving per rank over the window, mean projected window per rank) of the transforms; the
    ranks without one keep the traced saving; None when no rank has one."""
    if not transforms:
        return None
    total = window = 0.0
    for r in analysis.ranks:
        model = models.get(r.rank)
        t = transforms.get(r.rank)
        result = model.what_if(t) if model is not None and t is not None else None
        if result is None:
            total += traced_per_rank
            window += r.launch.totals.span_us
        else:
            total += result.saving_us
            window += result.before_us
    n = max(len(analysis.ranks), 1)
    return total / n, window / n


def price(analysis: Analysis, found: Sequence[Suggestion], models: Sequence[RankModel]) -> list[Suggestion]:
    """`found` with each saving from its what-if replay where the model projects (the traced estimate
    kept in `traced_saving_us` and the formula), then in saving order with each one's combined saving
    (it and every one above it replayed together, the top COMBINED_TOP at most)."""
    by_rank = {m.rank: m for m in models}
    if not any(m.trusted for m in models):
        return list(found)
    steps = max(analysis.headline.steps / max(len(analysis.ranks), 1), 1.0)
    priced: list[tuple[Suggestion, dict[int, Transform]]] = []
    for s in found:
        transforms = _transforms(s, analysis, by_rank)
        result = _saving(analysis, by_rank, transforms, s.saving_us)
        if result is None:
            window = analysis.headline.span_us / max(len(analysis.ranks), 1)
            capped = min(s.saving_us, window)
            priced.append((dataclasses.replace(
                s, saving_us=capped, saving_pct=100.0 * capped / window if window > 0 else 0.0,
                per_step_us=capped / steps, traced_saving_us=s.saving_us,
                whatif=NO_REPLAY), {}))
            continue
        saving, window = result
        words = (f"what-if replay of the change on the projected unprofiled steps: {fmt_us(window / steps)} → "
                 f"{fmt_us((window - saving) / steps)} per step")
        priced.append((dataclasses.replace(
            s, saving_us=saving, saving_pct=100.0 * saving / window if window > 0 else 0.0,
            per_step_us=saving / steps, traced_saving_us=s.saving_us, whatif=words,
            formula=f"{words}; traced estimate: {s.formula}"), transforms))
    priced = [p for p in priced if p[0].saving_us >= MIN_SAVING_US and p[0].saving_pct >= SILENT_BELOW_PCT]
    priced.sort(key=lambda p: -p[0].saving_us)
    out: list[Suggestion] = []
    chosen: dict[int, list[Transform]] = {}
    for i, (s, transforms) in enumerate(priced):
        if i >= COMBINED_TOP or not transforms:
            out.append(s)
            continue
        for rank, t in transforms.items():
            chosen.setdefault(rank, []).append(t)
        if i == 0:
            out.append(dataclasses.replace(s, combined_us=s.saving_us))
            continue
        together = _saving(analysis, by_rank, {k: compose(v) for k, v in chosen.items()}, 0.0)
        out.append(dataclasses.replace(s, combined_us=together[0] if together is not None else None))
    return out
