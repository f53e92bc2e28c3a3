"""Rules about Python loops the framework could do in one call: per-tensor loops (torch._foreach_* ops), requests served one at a time at batch 1 (one batched forward) per-sample loops with data-dependent sizes (padded, one batched call) and loops over a counter's values (one pass)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.analyzers.detectors import ensembles, foreach, requests, samples
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import CLASS, GEMM
from tracekit.suggestions.common import (
    Scope,
    fmt_us,
    gemm_dims,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_decode import decode_rows
from tracekit.units import plural

# Host time of a multi-tensor op per tensor in its lists: torch._foreach_mul_ over 288 tensors took
# 153 µs, _foreach_lerp_ 155 µs (H200, torch 2.11, ho_clip_ema_fixed in sample_traces/heldout/, as
# profiled): ~0.5 µs per tensor; its launches cost BARE_LAUNCH_US each besides.
FOREACH_US_PER_TENSOR = 0.5
BARE_LAUNCH_US = 3.0  # an unprofiled launch call (docs/design.md, "Launch cost under the profiler")


def _loops_text(per_step: float) -> str:
    """'2 loops per step', or for a loop that runs in some steps only '0.25 loops per step'."""
    return f"{plural(round(per_step), 'loop')} per step" if per_step >= 0.95 else f"{per_step:.2g} loops per step"


def foreach_loops(analysis: Analysis) -> Suggestion | None:
    """Per-tensor loops outside the optimizer (patterns.foreach_loops): each loop's CPU time − the
    multi-tensor ops' (their launches and ~0.5 µs per tensor), per step; the loop's `.item()` syncs go
    with it (clip_grad_norm_(foreach=True) keeps the norm on the GPU)."""
    scope = Scope.of(analysis)
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r, table in rank_tables(analysis, "foreach_loops"):
        if table is None or not len(table):
            continue
        for row in table[in_headline(r, table[foreach.FL_STEP].to_numpy())].to_dict("records"):
            groups.setdefault((r.rank, str(row[foreach.FL_OPS])), []).append(row)
    rows, total = [], 0.0
    for (rank, ops), runs in groups.items():
        n = scope.steps
        cpu = sum(x[foreach.FL_END] - x[foreach.FL_TS] for x in runs)
        launches = sum(x[foreach.FL_FOREACH_LAUNCHES] for x in runs)
        calls = sum(x[foreach.FL_CALLS] for x in runs)
        after = launches * BARE_LAUNCH_US + calls * FOREACH_US_PER_TENSOR
        saving = max(cpu - after, 0.0)
        total += saving
        rows.append({"rank": rank, "ops": ops, "loops_per_step": len(runs) / n,
                     "tensors": int(max(x[foreach.FL_TENSORS] for x in runs)),
                     "launches_per_step": sum(x[foreach.FL_LAUNCHES] for x in runs) / n,
                     "syncs_per_step": sum(x[foreach.FL_SYNCS] for x in runs) / n,
                     "foreach_launches_per_step": launches / n, "gpu_us": sum(x[foreach.FL_GPU_US] for x in runs),
                     "cpu_us": cpu, "replace": runs[0][foreach.FL_REPLACE], "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    per = {key: sum(x[key] for x in rows) / scope.ranks
           for key in ("loops_per_step", "launches_per_step", "foreach_launches_per_step", "syncs_per_step")}
    launched, after, syncs = per["launches_per_step"], per["foreach_launches_per_step"], per["syncs_per_step"]
    formula = (f"Σ per loop of its CPU time − the multi-tensor ops' ({after:.0f} launches per step × "
               f"{BARE_LAUNCH_US:.0f} µs + {FOREACH_US_PER_TENSOR} µs per tensor) = {fmt_us(saving)} as profiled; "
               f"{launched:.0f} launch calls per step become {after:.0f} (multi_tensor_apply: at most "
               f"{foreach.MAX_TENSORS[0]}–{foreach.MAX_TENSORS[-1]} tensors and {foreach.MAX_BLOCKS} chunks of "
               f"{foreach.CHUNK_ELEMENTS} elements per launch), the GPU work the same bytes"
               + (f"; the {syncs:.0f} host syncs per step inside the loops (`.item()`, `if` on a tensor) go" if syncs else ""))
    title = (f"Replace the per-tensor Python loops with torch._foreach_* ops: "
             f"{_loops_text(per['loops_per_step'])} over {max(x['tensors'] for x in rows)} "
             f"tensors ({', '.join(x['ops'] for x in rows)}) make {launched:.0f} launch calls"
             + (f" and {syncs:.0f} syncs" if syncs else "") + f"; {after:.0f} multi-tensor launches do the same work: "
             + "; ".join(dict.fromkeys(x["replace"] for x in rows)))
    return suggestion("foreach_loops", title, saving, scope, formula, rows)


def _roof(device: Device, dtype: object, flops: float, nbytes: float) -> float:
    """µs of `flops` and `nbytes` at the device's roof for `dtype` (NaN when either is unknown)."""
    peak = device.peak_flops(str(dtype)) if dtype else None
    if math.isnan(flops) or math.isnan(nbytes) or not peak:
        return math.nan
    return max(flops / peak, nbytes / device.memory_bandwidth) * 1e6


def batched_roof(r: RankAnalysis, device: Device, k: float, rows: np.ndarray | None = None) -> np.ndarray:
    """Per rank.gpu row of the repeated forwards (`rows`, bool per rank.gpu row; default
    patterns.in_requests): the roof time (µs) of its kernel at batch k: k × its FLOPs and bytes, a
    GEMM's weights read once (N × K of its op's shapes); NaN where unknown or outside."""
    costs = r.costs.table
    out = np.full(len(costs), np.nan)
    mask = rows if rows is not None else r.patterns.in_requests if r.patterns is not None else np.zeros(0, dtype=bool)
    if len(mask) != len(costs):
        return out
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    for i in np.flatnonzero(mask).tolist():
        dims = gemm_dims(costs[attribution.OP].iat[i], costs[attribution.SHAPES].iat[i])
        dtype = costs[attribution.DTYPE].iat[i]
        weights = dims[1] * dims[2] * DTYPE_SIZE.get(str(dtype), 4.0) if dims is not None else 0.0
        shared = min(weights, nbytes[i]) if not math.isnan(nbytes[i]) else 0.0
        out[i] = _roof(device, dtype, k * flops[i], k * (nbytes[i] - shared) + shared)
    return out


def _requests_per_step(r: RankAnalysis) -> float | None:
    t = r.patterns.requests if r.patterns is not None else None
    if t is None or not len(t):
        return None
    t = t[in_headline(r, t[requests.RQ_STEP].to_numpy())]
    return float(np.median(t[requests.RQ_REQUESTS].to_numpy(dtype=float))) if len(t) else None


def batch_requests(analysis: Analysis) -> Suggestion | None:
    """Steps made of the same forward repeated k times at batch 1 (patterns.requests), outside training
    and decode: one forward at batch k runs their host work and launches once and each kernel once at
    k × the work (at its roof for that work): the step − max(its host side / k, the batched GPU time)."""
    scope = Scope.of(analysis)
    device = analysis.device
    if device is None or any(getattr(r.patterns, "training", False) for r in analysis.ranks) or decode_rows(analysis):
        return None  # decode steps are batch_decode's: their forwards are tokens, not requests
    rows: list[dict[str, Any]] = []
    total, k_seen = 0.0, []
    for r in analysis.ranks:
        k = _requests_per_step(r)
        if k is None or k < requests.MIN_REQUESTS:
            continue
        k_seen.append(k)
        roof = batched_roof(r, device, k)
        t = r.patterns.requests
        served = max(len(t), 1)  # steps served as repeated forwards (their rows of in_requests)
        gpu_us = float(t[requests.RQ_GPU_US].sum()) / served
        mine = r.patterns.in_requests
        known = mine & ~np.isnan(roof)
        span = scope.span_us / scope.steps
        # per step: the kernels of known cost at their roof for k× the work (one kernel per k calls),
        # the others (by count) as they are; the what-if replay takes each at max(its time now, the roof)
        share_known = int(known.sum()) / max(int(mine.sum()), 1)
        gpu_after = float(roof[known].sum()) / k / served + gpu_us * (1 - share_known)
        after = max(span / k, gpu_after)
        saving = max(span - after, 0.0) * scope.steps
        total += saving
        rounds = float(np.median(t[requests.RQ_ROUNDS].to_numpy(dtype=float)))
        rows.append({"rank": r.rank, "requests_per_step": k, "rounds_per_step": rounds, "forward": str(t[requests.RQ_OPS].iat[0]),
                     "first_op": str(t[requests.RQ_FIRST].iat[0]), "launches_per_forward": int(t[requests.RQ_LAUNCHES].iat[0]),
                     "gpu_us_per_step": gpu_us, "batched_gpu_us": gpu_after, "batched_step_us": after,
                     "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    k = max(k_seen)
    x = rows[0]
    formula = (f"one forward at batch {k:.0f} instead of {k:.0f} at batch 1: the step − max(the step / {k:.0f} "
               f"(host work and launches once), the forwards' GPU time with each kernel at its roof for {k:.0f}× "
               f"the work, weights read once) = {fmt_us(scope.span_us / scope.steps)} − "
               f"{fmt_us(x['batched_step_us'])} per step = {fmt_us(saving / scope.steps)}")
    title = (f"Batch the requests: each step runs the same forward {k:.0f} times at batch 1 "
             f"({x['launches_per_forward']} launches each, same shapes); one forward at batch {k:.0f} launches once")
    rounds = float(x["rounds_per_step"])
    if rounds > 1:
        formula = (f"in each of {rounds:.0f} rounds per step, one forward on the {k:.0f} inputs stacked instead of {k:.0f} "
                   f"forwards: the forwards' host work and launches × 1/{k:.0f}, each kernel at its roof for {k:.0f}× the "
                   f"work, weights read once; the rounds' own ops stay; as traced, the step − max(the step / {k:.0f}, the "
                   f"batched GPU time) = {fmt_us(saving / scope.steps)} per step")
        title = (f"Stack the {k:.0f} forwards of each round into one call: each of the {rounds:.0f} rounds per step runs "
                 f"the same forward {k:.0f} times in a row on same-shaped inputs ({x['launches_per_forward']} launches "
                 f"each), e.g. classifier-free guidance's conditional and unconditional passes; "
                 f"`model(torch.cat([x, x]), ...).chunk({k:.0f})` launches once")
    return suggestion("batch_requests", title, saving, scope, formula, rows)


def _shared_bytes(shapes: object, dtype: object) -> float:
    """Bytes of a GEMM's 2-D operand larger than all its other operands together: the weight (or the
    matrix a loop multiplies every sample's vector by: a corpus, a codebook), which the loop's samples
    share and a batched call reads once; 0 where no operand is."""
    dims = [d for d in shapes if isinstance(d, tuple) and d and all(isinstance(x, int) for x in d)] \
        if isinstance(shapes, tuple) else []
    sizes = [math.prod(d) for d in dims]
    if not sizes:
        return 0.0
    big = max(range(len(sizes)), key=lambda i: sizes[i])
    if len(dims[big]) != 2 or sizes[big] <= sum(sizes) - sizes[big]:
        return 0.0
    return float(sizes[big]) * DTYPE_SIZE.get(str(dtype), 2.0)


def padded_roof(r: RankAnalysis, device: Device, k: float) -> np.ndarray:
    """Per rank.gpu row of a per-sample loop: the roof time (µs) of its kernel batched over the k
    samples padded to the largest: k × its FLOPs and bytes × (largest size / its sample's size), a
    GEMM's shared weight (_shared_bytes) read once; NaN where unknown or outside the loop."""
    costs = r.costs.table
    out = np.full(len(costs), np.nan)
    p = r.patterns
    sizes = p.sample_sizes if p is not None else np.zeros(0, dtype=np.int64)
    if p is None or len(sizes) != len(costs) or not len(p.sample_loops):
        return out
    largest = float(p.sample_loops[samples.SL_MAX].max())
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    gemm = r.classification.table[CLASS].to_numpy(dtype=object) == GEMM
    dtypes, shapes = costs[attribution.DTYPE].to_numpy(dtype=object), costs[attribution.SHAPES].to_numpy(dtype=object)
    for i in np.flatnonzero(sizes > 0).tolist():
        grow = k * largest / float(sizes[i])
        dtype = dtypes[i]
        shared = min(_shared_bytes(shapes[i], dtype), nbytes[i]) if gemm[i] else 0.0
        out[i] = _roof(device, dtype, grow * flops[i], grow * (nbytes[i] - shared) + shared)
    return out


def _owned_elsewhere(r: RankAnalysis) -> bool:
    """Whether the rank's per-sample loop kernels are also whole forwards repeated per request
    (batch_requests), an ensemble's members (batch_bmm) or embedding lookups table by table
    (concat_embeddings): a same-shaped loop there is that rule's to batch."""
    p = r.patterns
    loop = p.sample_sizes > 0
    if not loop.any():
        return False
    others = [p.in_requests, p.ensemble_members > 0, p.embedding_rows >= 0]
    return any(len(o) == len(loop) and bool((o & loop).any()) for o in others)


def batch_samples(analysis: Analysis) -> Suggestion | None:
    """Per-sample loops (patterns.sample_loops): the same ops repeated k ≥ 8 times a step with one
    data-dependent size. Padded to the batch maximum and run once: the loop's host work and launches
    × 1/k, each kernel at max(its time, its roof for the padded batch's work) / k; as traced, the
    loop's host time × (1 − 1/k) per step (the what-if replay prices it on the unprofiled step)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, Any]] = []
    total = 0.0
    for r, table in rank_tables(analysis, "sample_loops"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[samples.SL_STEP].to_numpy())]
        if _owned_elsewhere(r):
            t = t[t[samples.SL_MAX] > t[samples.SL_MIN]]  # same-shaped repeats another rule batches
        if not len(t):
            continue
        k = float(np.median(t[samples.SL_SAMPLES].to_numpy(dtype=float)))
        host = float(t[samples.SL_HOST_US].sum())
        saving = host * (1.0 - 1.0 / k)
        total += saving
        rows.append({"rank": r.rank, "samples_per_step": k, "loop": str(t[samples.SL_OPS].iat[0]),
                     "size_min": int(t[samples.SL_MIN].min()), "size_max": int(t[samples.SL_MAX].max()),
                     "size_mean": float(t[samples.SL_MEAN].mean()),
                     "counter": bool(t[samples.SL_COUNTER].astype(bool).all()),
                     "sliced": bool(t[samples.SL_SLICED].astype(bool).all()) if samples.SL_SLICED in t else False,
                     "launches_per_step": float(t[samples.SL_LAUNCHES].sum()) / scope.steps,
                     "host_us_per_step": host / scope.steps,
                     "gpu_us_per_step": float(t[samples.SL_GPU_US].sum()) / scope.steps, "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    x = rows[0]
    k = x["samples_per_step"]
    same = x["size_max"] == x["size_min"] == 1  # same-shaped slices joined after the loop (samples.JOINS)
    how = "run once on the whole batch" if same else f"padded to its largest size ({x['size_max']}) and run once"
    formula = (f"the loop {how} for the {k:.0f} samples: its "
               f"host time × (1 − 1/{k:.0f}) = {fmt_us(x['host_us_per_step'])} × {1 - 1 / k:.3f} per step as traced; "
               f"the what-if keeps one repetition's launches and each kernel at max(its time, its roof for the "
               f"padded batch's work) / {k:.0f}")
    title = (f"Pad the samples to the batch maximum and run the loop body once: each step repeats the same ops "
             f"{k:.0f} times, one per sample, with a size from the data ({x['size_min']}–{x['size_max']}), "
             f"{x['launches_per_step']:.0f} launches and {fmt_us(x['host_us_per_step'])} of host time per step")
    if same and x["counter"]:
        title = (f"Compute all {k:.0f} values in one pass: each step runs the same ops {k:.0f} times, once per "
                 f"value of a loop counter, over the same tensors ({x['loop']}), "
                 f"{x['launches_per_step']:.0f} launches and {fmt_us(x['host_us_per_step'])} of host time per step "
                 "(the counter as a tensor dimension: torch.bincount / scatter_add_ / one-hot)")
        formula = (f"the loop's {k:.0f} repetitions as one pass over the same inputs: its host time × (1 − 1/{k:.0f}) "
                   f"= {fmt_us(x['host_us_per_step'])} × {1 - 1 / k:.3f} per step as traced; the what-if keeps one "
                   "repetition's launches and kernels (each repetition reads the same inputs; one pass reads them once)")
    elif same and x["sliced"]:
        title = (f"Compute all {k:.0f} slices in one broadcast pass: each step runs the same ops {k:.0f} times, "
                 f"once per slice that a loop counter selects ({x['loop']}), {x['launches_per_step']:.0f} launches "
                 f"and {fmt_us(x['host_us_per_step'])} of host time per step (per-slice constants as a tensor "
                 "broadcast along the sliced dimension, e.g. shape (C, 1, 1))")
        formula = (f"the loop's {k:.0f} repetitions as one pass over the whole tensor: its host time × "
                   f"(1 − 1/{k:.0f}) = {fmt_us(x['host_us_per_step'])} × {1 - 1 / k:.3f} per step as traced; the "
                   f"what-if keeps one repetition's launches and each kernel at max(its time, its roof for "
                   f"{k:.0f}× its work) / {k:.0f}")
    elif same:
        title = (f"Run the loop body once for all {k:.0f}: each step repeats the same ops {k:.0f} times on "
                 f"same-shaped inputs and joins the results, {x['launches_per_step']:.0f} launches and "
                 f"{fmt_us(x['host_us_per_step'])} of host time per step (stack the samples or chunks; "
                 "per-table or per-head weights stacked into one batched call)")
        if any(samples.MODEL_OPS.match(f"aten::{op}") for op in x["loop"].split(" → ")):  # a model per slice
            title = (f"Fold the loop into the batch: each step runs the same model {k:.0f} times on same-shaped "
                     f"slices ({x['loop'][:40]}...) and joins the results, {x['launches_per_step']:.0f} launches and "
                     f"{fmt_us(x['host_us_per_step'])} of host time per step; run it once on all {k:.0f} slices "
                     "(x.flatten(0, 1) in, .view(B, T, ...) out: per-frame or per-chunk calls as one batch)")
    segments = not same and x["loop"] in SEGMENT_REDUCTIONS  # one reduction per slice of one tensor (samples.VIEWS)
    if segments:
        title = (f"Reduce all {k:.0f} segments in one call: each step runs `{x['loop']}` {k:.0f} times, once per "
                 f"slice of one tensor ({x['size_min']}–{x['size_max']} rows each), "
                 f"{x['launches_per_step']:.0f} launches and {fmt_us(x['host_us_per_step'])} of host time per step "
                 "(a segment reduction: index_add_ / scatter_reduce over a segment index built with the batch)")
    found = suggestion("batch_samples", title, saving, scope, formula, rows)
    if found is not None and same and x["counter"]:
        found = dataclasses.replace(found, snippet=COUNTER_SNIPPET)
    elif found is not None and segments:
        found = dataclasses.replace(found, snippet=SEGMENT_SNIPPET)
    return found


# A loop body of one of these over views of one tensor is a segment reduction (samples.sliced_views)
SEGMENT_REDUCTIONS = frozenset({"mean", "sum", "amax", "amin", "max", "min", "prod", "logsumexp", "norm"})
SEGMENT_SNIPPET = '''\
# One reduction per segment of one tensor (sub-words → words, atoms → molecules, points → objects):
#   words = torch.stack([h[b, s:e].mean(0) for b, spans in enumerate(batch_spans) for s, e in spans])
# Build a segment id per row once with the batch (from the tokenizer's word_ids(), say), then one call:
seg = seg_ids.to(h.device)                         # (n_rows,) the word of each kept sub-word row
rows = h[row_batch, row_pos]                       # (n_rows, d) the kept sub-word vectors, one gather
sums = torch.zeros(n_words, h.shape[-1], device=h.device, dtype=h.dtype).index_add_(0, seg, rows)
words = sums / torch.bincount(seg, minlength=n_words).clamp_min(1)[:, None]
# (max per segment: torch.zeros(...).scatter_reduce_(0, seg[:, None].expand_as(rows), rows, "amax"))
'''


COUNTER_SNIPPET = '''\
# A loop over values (classes, bins, ids) runs the same kernels once per value over the same tensors:
#   for c in range(C): inter[c] += ((pred == c) & (gt == c)).sum(); union[c] += ((pred == c) | (gt == c)).sum()
# Make the value a tensor index and do all of them in one pass:
conf = torch.bincount((gt * C + pred).flatten(), minlength=C * C).view(C, C)   # or conf.scatter_add_(...)
inter = conf.diagonal(); union = conf.sum(0) + conf.sum(1) - inter
# (per-value masks at once: F.one_hot(x, C); per-value sums: torch.zeros(C).index_add_(0, x, w))
'''


def ensemble_factor(r: RankAnalysis, device: Device) -> np.ndarray:
    """Per rank.gpu row of an ensemble called member by member (patterns.ensemble_members, k members):
    the factor its time takes with the members stacked, each layer one batched kernel for all k: max(its
    time, its roof for k× the work) / k / its time (a batched kernel is never faster than one member's);
    1 outside, or where the cost is unknown (k× its time: nothing gained on the GPU). Kernels of attention
    heads on their shared input (patterns.ensemble_shared: its autocast cast, the sum of its k input
    gradients) run once for all heads: 1/k."""
    costs = r.costs.table
    out = np.ones(len(costs))
    p = r.patterns
    k = p.ensemble_members if p is not None else np.zeros(0, dtype=np.int64)
    dur = p.ensemble_gpu_us if p is not None else np.zeros(0)
    if len(k) != len(costs) or len(dur) != len(costs):
        return out
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    shared = p.ensemble_shared if p is not None else np.zeros(0, dtype=bool)
    for i in np.flatnonzero(k > 0).tolist():
        if len(shared) == len(costs) and shared[i]:
            out[i] = 1.0 / k[i]
            continue
        roof = _roof(device, costs[attribution.DTYPE].iat[i], k[i] * flops[i], k[i] * nbytes[i])
        if dur[i] > 0 and not math.isnan(roof):
            out[i] = max(dur[i], roof) / k[i] / dur[i]
    return out


def ensemble_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """batch_bmm's evidence rows for ensembles called member by member and attention heads called head
    by head (patterns.ensembles), one per rank × direction × kind: k members' launches and the Python
    between them become one member's, per stretch; as traced, the stretches' host time × (1 − 1/k) per
    step (the what-if prices the batched kernels at their roof)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, Any]] = []
    for r, table in rank_tables(analysis, "ensembles"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[ensembles.EN_STEP].to_numpy())]
        for (direction, kind), g in t.groupby([ensembles.EN_DIRECTION, ensembles.EN_KIND], sort=False):
            k = float(np.median(g[ensembles.EN_MEMBERS].to_numpy(dtype=float)))
            host = float(g[ensembles.EN_HOST_US].sum())
            rows.append({"rank": r.rank, "kind": "ensemble", "stack": str(kind), "direction": str(direction),
                         "members": k, "ops": str(g[ensembles.EN_OPS].iat[0]), "first": str(g[ensembles.EN_FIRST].iat[0]),
                         "launches_per_member": int(g[ensembles.EN_LAUNCHES].iat[0]),
                         "stretches_per_step": len(g) / scope.steps,
                         "gemms_per_step": float(g[ensembles.EN_GEMMS].sum()) / scope.steps,
                         "host_us_per_step": host / scope.steps,
                         "gpu_us_per_step": float(g[ensembles.EN_GPU_US].sum()) / scope.steps,
                         "saving_us": host * (1.0 - 1.0 / k)})
    return rows
