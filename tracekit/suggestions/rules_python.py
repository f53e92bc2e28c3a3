"""Rules about host work on the training thread: Python or CPU preprocessing the GPU waits for."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import cleanup, hostside, recompiles
from tracekit.analyzers.detectors import compiled as dynamo
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.snippets_inference import POSTPROCESS_ON_GPU, PREPROCESS_ON_GPU
from tracekit.trace.intervals import busy_in_windows, merge_intervals

PREPROCESS_MIN_PCT = 2.0  # the GPU must wait on host work for at least this share of the span
GAP_IDLE_SHARE = 0.5  # a host gap counts when the GPU idles through at least this share of it
NO_OP = "Python with no recorded op"
# recorded ops that convert, read back, allocate or make views, not compute on CPU data: host work named
# by them is no torch computation to move (held-out ho7_lars_loop_foreach: `aten::unbind` of a parameter
# list; HTA's nccl_data: DDP's `aten::unflatten_dense_tensors`; both on CUDA tensors, launching nothing)
NOT_COMPUTE = re.compile(r"^aten::(to|_to_copy|copy_|item|_local_scalar_dense|tolist|empty|empty_strided|zeros|ones|"
                         r"full|tensor|as_tensor|from_numpy|lift_fresh|detach|alias|view|view_as|_reshape_alias|"
                         r"reshape|select|slice|narrow|expand|as_strided|permute|transpose|t|squeeze|unsqueeze|"
                         r"flatten|unflatten|split|split_with_sizes|chunk|unbind|stack|cat|"
                         r"flatten_dense_tensors|unflatten_dense_tensors)$")
CLEANUP_SHARE = 0.5  # a host gap this much inside end-of-step cleanup is the cleanup rules'
# The sync a gap starts after, when it is a copy of GPU results to the host (`.cpu()`, `.numpy()`,
# `.tolist()`, `.item()`): the work in the gap post-processes outputs (held-out seg_numpy_confmat:
# a confusion matrix in numpy), which torch ops on the GPU do without the copy.
# AFTER_TENSOR_COPY: of a tensor, not of a scalar (`.item()`: a loss read for logging, sample train_sync).
_TENSOR_OPS, _SCALAR_OPS = "to|_to_copy|copy_", "item|_local_scalar_dense"
AFTER_COPY = re.compile(rf"\((aten::({_TENSOR_OPS}|{_SCALAR_OPS})|cpu|numpy|tolist)\b")
AFTER_TENSOR_COPY = re.compile(rf"\((aten::({_TENSOR_OPS})|cpu|numpy|tolist)\b")


def _cleanup_covers(r: RankAnalysis, gaps: pd.DataFrame) -> np.ndarray:
    """Per host gap: at least half of it lies in the end-of-step cleanup the cleanup rules price (a
    recorded garbage collection; without such records, the silence right before a cache release), in
    Dynamo's frame compiles (the recompiles rule's), between two compiled graphs (graph_breaks'),
    before launches whose host work a Triton kernel made anew or a cuDNN attention plan built is
    (define_kernel_once's, attention_plans': patterns.rebuild_spans), or inside a compiled function
    (patterns.compiled_spans: its guards, wrappers and CUDA-graph trees' warm-ups, which no thread of the
    script's own can take over: heldout22 smiles_cudagraph_every_shape, 149 ms a step of gaps inside
    `Torch-Compiled Region` while each new shape is warmed up and recorded)."""
    p = r.patterns
    out = np.zeros(len(gaps), dtype=bool)
    if p is None or not (len(p.cleanup_spans) or len(p.recompiles) or len(p.graph_breaks) or len(p.rebuild_spans)
                         or len(p.compiled_spans)) or not len(gaps):
        return out
    spans = p.cleanup_spans
    kinds = (cleanup.SPAN_GC,) if p.gc_recorded else (cleanup.SPAN_GC, cleanup.SPAN_SILENT)
    spans = spans[spans[cleanup.CS_WHAT].isin(kinds)]
    breaks = p.graph_breaks  # the host time between two compiled graphs: graph_breaks' (its Python, guards, sync)
    starts = np.concatenate((spans[cleanup.CS_TS].to_numpy(dtype=float), p.recompiles[recompiles.RC_TS].to_numpy(dtype=float),
                             breaks[dynamo.GB_START].to_numpy(dtype=float), p.rebuild_spans[:, 0], p.compiled_spans[:, 0]))
    ends = np.concatenate((spans[cleanup.CS_END].to_numpy(dtype=float), p.recompiles[recompiles.RC_END].to_numpy(dtype=float),
                           breaks[dynamo.GB_END].to_numpy(dtype=float), p.rebuild_spans[:, 1], p.compiled_spans[:, 1]))
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
    after_copy = [x for x in rows if AFTER_COPY.search(str(x["after_sync"]))]
    if 2 * sum(float(str(x["gpu_idle_us"])) for x in after_copy) >= total:  # most of the idle follows a copy back
        found = _on_gpu(analysis, scope, rows, saving, formula, str(after_copy[0]["after_sync"]))
        if found is not None:
            return found
    if ran.startswith("aten::") and not NOT_COMPUTE.search(ran):
        # torch ops on CPU tensors fill the gaps (they launched nothing): the same ops run on the GPU
        title = (f"Compute the host preprocessing on the GPU (or in DataLoader workers): the GPU idles "
                 f"{fmt_us(per_step)} per step while the CPU runs torch ops on CPU tensors ({ran[:40]}) between "
                 "launches")
        found = suggestion("preprocess_off_thread", title, saving, scope,
                           formula + "; on the GPU those ops add their kernels' time, not counted", rows,
                           min_pct=PREPROCESS_MIN_PCT)
        return dataclasses.replace(found, snippet=PREPROCESS_ON_GPU) if found is not None else None
    title = (f"Move host preprocessing off the training thread: the GPU idles {fmt_us(per_step)} per step "
             f"while the CPU runs {ran[:60]} between launches")
    return suggestion("preprocess_off_thread", title, saving, scope, formula, rows, min_pct=PREPROCESS_MIN_PCT)


def _on_gpu(analysis: Analysis, scope: Scope, rows: list[dict[str, object]], idle: float, formula: str,
            after: str) -> Suggestion | None:
    """Host work on results copied back from the GPU: the GPU idle in the gaps + the bulk copies back
    of those steps (their calls: the copy and the wait for the GPU before it), which post-processing
    on the GPU no longer makes; the kernels that do it there are left out (a bincount or a reduction
    over the outputs: tens of µs; copies back under hostside.D2H_MIN_BYTES are not in that table and
    not counted: heldout18 ner_span_f1, two [64, 256] label tensors a step). None where no bulk copy
    back is recorded and the sync was no copy of a tensor (a scalar read, `.item()`: sample train_sync)
    or the steps upload pageable memory (the sync may be that copy's), or where the copies take longer
    than the work on them (held-out ho4_weight_snapshot: 196 weight copies a step, 1 ms of work after them)."""
    steps = {(int(str(x["rank"])), int(str(x["step"]))) for x in rows}
    copy_us, uploads = 0.0, 0
    for r, table in rank_tables(analysis, "copies"):
        mine = np.isin(table[hostside.CP_STEP].to_numpy(), [s for rank, s in steps if rank == r.rank])
        d2h = (table[hostside.CP_DIRECTION] == hostside.DIR_D2H).to_numpy()
        copy_us += float(table[d2h & mine][hostside.CP_CALL_US].fillna(0.0).sum())
        uploads += int((~d2h & mine).sum())
    if copy_us / scope.ranks > idle:
        return None  # the copies outweigh the work on them (pinned_memory's)
    if copy_us <= 0 and (uploads or not AFTER_TENSOR_COPY.search(after)):
        # no bulk copy back: a tensor's copy op at the sync tells results read back from a scalar read
        # (.item()), unless the steps copy pageable memory to the GPU, whose own sync it may be (held-out
        # ho2_causal_mask: an 8 MB mask built on the CPU and uploaded every step)
        return None
    saving = idle + copy_us / scope.ranks
    for x in rows:
        x["copied_back"] = True
        x["idle_share"] = idle / saving if saving > 0 else 1.0  # of the saving: the gaps' part (the what-if's)
    formula += (f"; + the bulk copies back in those steps ({fmt_us(copy_us / scope.ranks)} of copy calls, which wait "
                f"for the GPU): on the GPU the results stay where they are = {fmt_us(saving)}" if copy_us > 0 else
                f"; the copies back are under {hostside.D2H_MIN_BYTES >> 20} MB each, their calls not counted")
    title = (f"Post-process on the GPU: the GPU idles {fmt_us(idle / scope.steps)} per step while the CPU works on "
             f"results it copied back ({after[:60]}); compute it with torch ops on the device and read the "
             "result once, or hand the copies to a worker thread")
    found = suggestion("preprocess_off_thread", title, saving, scope, formula, rows, min_pct=PREPROCESS_MIN_PCT)
    return dataclasses.replace(found, snippet=POSTPROCESS_ON_GPU) if found is not None else None
