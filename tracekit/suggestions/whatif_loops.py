"""What-if transforms of the rules about work done one item at a time (per-tensor loops, batch-1 requests, accumulated micro-batches, RNN cells, embedding tables, caches grown by torch.cat, tokens generated without a KV cache)."""

from __future__ import annotations

import numpy as np

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.detectors import embeddings, foreach, recurrent
from tracekit.analyzers.kernels import GEMM, MEMCPY
from tracekit.model.outlook import Transform
from tracekit.model.whatif import (
    batch_forwards,
    compose,
    foreach_runs,
    fuse_region,
    remove_calls,
    scale_host,
    scale_nodes,
    scale_rows,
    scale_step,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_batching import (
    FOREACH_US_PER_TENSOR,
    batched_roof,
    ensemble_factor,
    padded_roof,
)
from tracekit.suggestions.rules_cache import cached_times
from tracekit.suggestions.whatif_evidence import (
    BARE_LAUNCH_US,
    class_rows,
    evidence_number,
    loop_calls,
    rank_evidence,
)


def foreach_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The loops' calls as multi-tensor ops (model/whatif.py foreach_runs): per run, the launches
    and per-tensor calls the detector counted; the loops' device-to-host copies (`.item()`) gone."""
    p = r.patterns
    if p is None or not len(p.foreach_loops) or loop_calls(r) is None:
        return None
    t = p.foreach_loops
    copies = class_rows(r, (MEMCPY,))
    return foreach_runs(p.foreach_calls, t[foreach.FL_FOREACH_LAUNCHES].to_numpy(dtype=float),
                        t[foreach.FL_CALLS].to_numpy(dtype=float), BARE_LAUNCH_US, FOREACH_US_PER_TENSOR, copies)


def batch_requests_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The k batch-1 forwards as one at batch k (model/whatif.py batch_forwards), each kernel at its
    roof for k× the work (rules_batching.batched_roof); in rounds of k forwards, only their calls
    scaled (the rounds' own ops stay)."""
    k = max((evidence_number(e, "requests_per_step") for e in rank_evidence(s, r)), default=0.0)
    rounds = max((evidence_number(e, "rounds_per_step") for e in rank_evidence(s, r)), default=0.0)
    p = r.patterns
    if k < 2 or p is None or r.roofline.device is None or len(p.in_requests) != len(r.classification.table):
        return None
    # rounds of k forwards (each round after the last): only the forwards' calls × 1/k, the rounds' own ops stay
    return batch_forwards(k, p.in_requests, batched_roof(r, r.roofline.device, k), whole_step=rounds <= 1)


def _micro_batches(r: RankAnalysis, m: float) -> Transform | None:
    """m accumulated micro-batches as one at m× the size (model/whatif.py batch_forwards over the passes'
    rows, patterns.in_accumulation): the calls that launch the passes and the gaps before them × 1/m,
    each kernel its 1/m share of max(its time, its roof for m× the work, rules_batching.batched_roof);
    the optimizer step and the rest of the step as they are."""
    p = r.patterns
    if p is None or r.roofline.device is None or len(p.in_accumulation) != len(r.classification.table):
        return None
    rows = p.in_accumulation
    return batch_forwards(m, rows, batched_roof(r, r.roofline.device, m, rows), whole_step=False)


def larger_batch_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Per sample at k× the batch: the host side of the step × 1/k, the GPU durations as they are (k× the
    work per step, shared by k× the samples). Launch latencies are kept whole per sample (conservative).
    Gradient accumulation (evidence micro_batch_multiple m): _micro_batches."""
    m = max((evidence_number(e, "micro_batch_multiple") for e in rank_evidence(s, r)), default=0.0)
    if m >= 2:
        return _micro_batches(r, m)
    k = max((evidence_number(e, "batch_multiple") for e in rank_evidence(s, r)), default=0.0)
    return scale_step(1.0 / k, gpu_factor=1.0) if k >= 2 else None


def batch_samples_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The per-sample loop padded and run once (model/whatif.py fuse_region): its launch calls and the
    Python between them gone but for one repetition's launches at the unprofiled launch cost, each
    kernel × max(its time, its roof for the padded batch's work, rules_batching.padded_roof) / k / its time
    (a counter loop's kernels × 1/k: one pass reads the inputs every repetition reads, once); the other
    runtime calls between the loop's launches (a library's queries) go with them."""
    m = max((evidence_number(e, "micro_batch_multiple") for e in rank_evidence(s, r)), default=0.0)
    if m >= 2:  # per-sample gradients one sample at a time (rules_memory.per_sample_gradients)
        return _micro_batches(r, m)
    k = max((evidence_number(e, "samples_per_step") for e in rank_evidence(s, r)), default=0.0)
    p = r.patterns
    if k < 2 or p is None or r.roofline.device is None or len(p.sample_sizes) != len(r.classification.table):
        return None
    mine = p.sample_sizes > 0
    dur = np.nan_to_num(p.sample_gpu_us)
    if len(dur) != len(mine) or not mine.any():
        return None
    roof = padded_roof(r, r.roofline.device, k)
    batched = np.where(np.isnan(roof), k * dur, np.maximum(dur, np.nan_to_num(roof)))
    if any(e.get("counter") is True for e in rank_evidence(s, r)):
        batched = dur  # one pass over the inputs every repetition reads: one repetition's work (samples.counter_loop)
    factor = np.where(mine & (dur > 0), batched / k / np.where(dur > 0, dur, 1.0), 1.0)
    launches = max(round(max((evidence_number(e, "launches_per_step") for e in rank_evidence(s, r)), default=0.0) / k), 1)
    return fuse_region(mine, factor, launches, BARE_LAUNCH_US, whole_span=True)


def cudnn_rnn_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The cell loop as cuDNN's whole-sequence call (suggestions/rules_loops.py cudnn_times): its GEMMs ×
    the rule's factor, the cell kernels as they are, the gradient accumulations and copies gone; the
    loop's launch calls and the Python between them gone but for one call per loop window (cuDNN's
    forward and backward call; its own per-time-step launches from C++ are taken to hide under the GPU work)."""
    p = r.patterns
    rows = rank_evidence(s, r)
    if p is None or not rows or len(p.rnn_rows) != len(r.classification.table):
        return None
    gemm = evidence_number(rows[0], "gemm_factor")
    factor = np.select([p.rnn_rows == recurrent.ROW_GEMM, p.rnn_rows == recurrent.ROW_CELL], [gemm, 1.0], 0.0)
    windows = max(round(evidence_number(rows[0], "windows_per_step")), 1)
    return fuse_region(p.rnn_rows > 0, factor, windows, BARE_LAUNCH_US)


def concat_embeddings_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Each flagged lookup group (direction, op, width, dtype) one merged call: its kernels × merged /
    now GPU time (the rule's evidence), the calls and the Python between them gone but for one call that
    launches one call's kernel sequence per group."""
    p = r.patterns
    rows = rank_evidence(s, r)
    t = p.embedding_lookups if p is not None else None
    if p is None or t is None or not len(t) or not rows or len(p.embedding_rows) != len(r.classification.table):
        return None
    factor_of = {(e.get("direction"), e.get("op"), e.get("dim"), e.get("dtype")): evidence_number(e, "gpu_factor") for e in rows}
    keys = zip(t[embeddings.EL_DIRECTION], t[embeddings.EL_OP], t[embeddings.EL_DIM].astype(int), t[embeddings.EL_DTYPE],
               strict=True)
    per_row = np.array([factor_of.get(k, np.nan) for k in keys] + [np.nan])  # the last: rows in no group
    factor = per_row[np.where(p.embedding_rows >= 0, p.embedding_rows, len(per_row) - 1)]
    flagged = ~np.isnan(factor)
    launches = max(sum(int(evidence_number(e, "merged_kernels")) for e in rows), 1)
    return fuse_region(flagged, np.where(flagged, factor, 1.0), launches, BARE_LAUNCH_US)


def preallocate_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The copy kernels of the cats that grow a cache (patterns.in_cache_growth) shorter by the saving
    per step: an in-place write of the new positions is what is left of each."""
    mask = r.patterns.in_cache_growth if r.patterns is not None else None
    if mask is None or len(mask) != len(r.classification.table) or not mask.any():
        return None
    return scale_nodes(mask, per_step)


def use_kv_cache_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Each forward after the first of a cache-less generation loop at one position: its kernels ×
    their one-position time / their time now (rules_cache.cached_times), the host as it is (every
    forward still launches its kernels)."""
    p = r.patterns
    if p is not None and any(e.get("mode") == "cross" for e in s.evidence):
        # a fixed context projected in every forward: those projections' calls and kernels gone
        return remove_calls(p.context_calls) if p.context_calls.any() else None
    if p is None or r.roofline.device is None or len(p.generation_share) != len(r.classification.table):
        return None
    after = cached_times(r, r.roofline.device)
    dur = p.generation_gpu_us
    mine = ~np.isnan(after) & (np.nan_to_num(dur) > 0)
    if not mine.any():
        return None
    return scale_rows(np.where(mine, np.nan_to_num(after) / np.where(mine, dur, 1.0), 1.0))


def batch_bmm_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The GEMM loops as one batched GEMM per run (their GEMM kernels × batched / now time); an
    ensemble's members stacked (rules_batching.ensemble_factor: each kernel at max(its time, its roof for
    k× the work) / k, one member's launches left, the Python between the members gone; the optimizer's
    host work × 1/k: k× fewer parameter tensors)."""
    mine = rank_evidence(s, r)
    rows = [e for e in mine if e.get("kind") != "ensemble"]
    members = [e for e in mine if e.get("kind") == "ensemble"]
    parts: list[Transform] = []
    if rows:
        now = sum(evidence_number(e, "runs") * evidence_number(e, "gemms_per_run") * evidence_number(e, "kernel_us") for e in rows)
        batched = sum(evidence_number(e, "runs") * evidence_number(e, "batched_us") for e in rows)
        steps = max(r.launch.totals.steps, 1)
        launches = max(round(sum(evidence_number(e, "runs") for e in rows) / steps), 1)
        parts.append(fuse_region(class_rows(r, (GEMM,)), min(batched / now, 1.0) if now > 0 else 1.0, launches,
                                 BARE_LAUNCH_US))
    p = r.patterns
    if members and p is not None and r.roofline.device is not None and len(p.ensemble_members) == len(r.classification.table):
        # one member's launches per stretch (a stack of layers with per-head attention: one per layer)
        launches = max(round(sum(evidence_number(e, "launches_per_member") * max(evidence_number(e, "stretches_per_step"), 1.0)
                                 for e in members)), 1)
        parts.append(fuse_region(p.ensemble_members > 0, ensemble_factor(r, r.roofline.device), launches,
                                 BARE_LAUNCH_US, p.ensemble_calls))
        k = max(evidence_number(e, "members") for e in members)
        if len(p.in_optimizer) == len(p.ensemble_members) and p.in_optimizer.any():
            # the members' parameters stacked: k× fewer tensors for the optimizer's per-tensor host work
            parts.append(scale_host(p.in_optimizer, 1.0 / k))
    if not parts:
        return None
    return compose(parts) if len(parts) > 1 else parts[0]
