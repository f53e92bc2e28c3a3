"""Patterns the suggestion rules read: kernel sequences (sequences.py), host-side stalls (hostside.py), optimizer steps (optimizer.py) and those run on the host (offload.py), per-tensor loops (foreach.py), batch-1 request loops (requests.py), gradient accumulation over repeated micro-batches (accumulation.py), per-sample loops (samples.py), masked attention and the masks built for it (attention_mask.py, mask_build.py), SDPA fallbacks (sdpa_fallback.py), layer chains and layout transposes (layers.py), torch.compile graph breaks (compiled.py) and recompiles inside the steps (recompiles.py), user Triton launches (triton_launch.py), GEMM leading dimensions (gemm_layout.py), RNN cell loops (recurrent.py), embedding lookups per table (embeddings.py), caches grown by torch.cat (cache_growth.py), static weights converted before every GEMM call (weight_convert.py), forwards re-run in backward by activation checkpointing (recompute.py) and their entries in the forward (checkpoint_entry.py), generation re-running the model over the whole sequence per token (generation.py), model ensembles and attention heads called member by member (ensembles.py, heads.py), autograd anomaly checks (anomaly.py), end-of-step cleanup (cleanup.py), synchronous kernel launches (launch_blocking.py), multi-process DataLoader iterators created per step (loader_respawn.py), kernels launched piece by piece with grids far smaller than the GPU (underfilled.py), grouped-query K/V expanded for SDPA (gqa_expand.py), prefill logits of every position read at the last (full_logits.py), gradients no optimizer reads (frozen_grads.py), L2 penalties over every parameter in the loss (l2_penalty.py) and backward run once per loss (backward_passes.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analyzers import names
from tracekit.analyzers.costs.attribution import KernelCosts
from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.detectors import (
    accumulation,
    attention,
    attention_mask,
    backward_passes,
    cache_growth,
    embeddings,
    ensembles,
    foreach,
    frozen_grads,
    full_logits,
    gemm_layout,
    generation,
    gqa_expand,
    heads,
    hostside,
    l2_penalty,
    layers,
    loader_respawn,
    mask_build,
    offload,
    optimizer,
    recompute,
    recurrent,
    requests,
    samples,
    sdpa_fallback,
    sequences,
    toplevel,
    triton_launch,
    underfilled,
    weight_convert,
)
from tracekit.analyzers.detectors import anomaly as anomaly_mode
from tracekit.analyzers.detectors import cleanup as step_cleanup
from tracekit.analyzers.detectors import compiled as dynamo
from tracekit.analyzers.detectors import launch_blocking as sync_launch
from tracekit.analyzers.detectors import recompiles as dynamo_compiles
from tracekit.analyzers.kernels import CLASS, LIBRARY, KernelClassification
from tracekit.jsonsafe import records
from tracekit.trace import tables
from tracekit.trace.model import RankTrace, TraceMeta
from tracekit.trace.tables import GPU_NAME, GPU_STEP, OP_NAME, STEP_NUMBER

if TYPE_CHECKING:
    from tracekit.analyzers.step_plan import StepPlan

TRAINING = re.compile(r"Backward|^autograd::engine|^Optimizer\.step")
# torch's TensorIterator reductions (sum, mean, var, amax...): what Inductor fuses with the pointwise
# ops around them into one reduction kernel (not sorts, scans, pooling or losses, also class reduction)
REDUCE_KERNEL = re.compile(r"at::native::reduce_kernel<")


@dataclass(frozen=True)
class Patterns:
    """One rank's patterns; each table's columns are the constants of sequences.py / hostside.py."""

    rank: int
    num_sms: int | None  # streaming multiprocessors of the device (deviceProperties), None unknown
    chains: pd.DataFrame  # sequences.CHAIN_COLUMNS: elementwise/normalization chains
    loops: pd.DataFrame  # sequences.LOOP_COLUMNS: same-shape GEMM loops
    attention: pd.DataFrame  # attention.ATTENTION_COLUMNS: unfused attention
    syncs: pd.DataFrame  # hostside.SY_*: host synchronisation calls
    copies: pd.DataFrame  # hostside.CP_*: pageable host-to-device and bulk device-to-host copies
    dataloader: pd.DataFrame  # hostside.DL_*: DataLoader time per step
    comm: pd.DataFrame  # hostside.CM_*: communication vs compute per step
    training: bool = False  # the trace runs a backward pass or an optimizer step
    # optimizer.OPTIMIZER_COLUMNS: one row per Optimizer.step range
    optimizer: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(optimizer.OPTIMIZER_COLUMNS)))
    in_optimizer: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.gpu row
    # offload.OFFLOAD_COLUMNS per optimizer step run on the host; per rank.gpu row, one of its parameter
    # or gradient copies; per rank.runtime row, a call of those copies' ops, or on such a step's thread
    offload: pd.DataFrame = field(default_factory=offload.empty)
    offload_copies: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    offload_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    offload_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # attention_mask.MASKED_COLUMNS: SDPA calls with a square mask and is_causal=False
    masked_attention: pd.DataFrame = field(default_factory=attention_mask.empty)
    # mask_build.BUILD_COLUMNS per mask built in a step for those calls; per rank.gpu row, launched by a
    # build's ops; per rank.runtime row, on a build's thread
    mask_builds: pd.DataFrame = field(default_factory=mask_build.empty)
    in_mask_build: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    mask_build_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # hostside.HG_*: the host's long silences (no launch or sync call), outside the DataLoader
    host_gaps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(hostside.HOST_GAP_COLUMNS)))
    # per rank.gpu row: a cuDNN NCHW <-> NHWC layout transpose kernel (layers.LAYOUT_TRANSPOSE)
    layout_transposes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # layers.LLM_COLUMNS: unfused RMSNorm / SwiGLU / RoPE / cross-entropy chains; in_llm_chain their kernels
    llm_chains: pd.DataFrame = field(default_factory=layers.empty)
    in_llm_chain: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # compiled.COMPILED_COLUMNS per step with torch.compile regions; compiled.BREAK_COLUMNS per graph break
    compiled: pd.DataFrame = field(default_factory=dynamo.empty_compiled)
    graph_breaks: pd.DataFrame = field(default_factory=dynamo.empty_breaks)
    backward_breaks: pd.DataFrame = field(default_factory=dynamo.empty_backward_breaks)  # BACKWARD_BREAK_COLUMNS
    # recompiles.RECOMPILE_COLUMNS per compile span inside a step (Dynamo compiling a frame)
    recompiles: pd.DataFrame = field(default_factory=dynamo_compiles.empty)
    break_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row
    # triton_launch.TRITON_LAUNCH_COLUMNS per user Triton launch configuration, and per rank.gpu row
    # the index of its row (-1: not a user Triton kernel)
    triton_launches: pd.DataFrame = field(default_factory=triton_launch.empty)
    triton_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # gemm_layout.GEMM_LAYOUT_COLUMNS: leading dimensions of the GEMM calls, from their strides
    gemm_layouts: pd.DataFrame = field(default_factory=gemm_layout.empty)
    # recurrent.RNN_COLUMNS per step with RNN cell calls; per rank.gpu row its recurrent.ROW_* code
    rnn_cells: pd.DataFrame = field(default_factory=recurrent.empty)
    rnn_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    # embeddings.LOOKUP_COLUMNS per step × lookup group; per rank.gpu row the index of its row (-1 none)
    embedding_lookups: pd.DataFrame = field(default_factory=embeddings.empty)
    embedding_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # foreach.FOREACH_COLUMNS per run of per-tensor calls outside the optimizer; per rank.runtime row
    # the index of its run (-1: none)
    foreach_loops: pd.DataFrame = field(default_factory=foreach.empty)
    foreach_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sync_in_loop: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per syncs row: inside one
    # per rank.gpu row: launched by a loop a graph leaves out: a hand-written optimizer, or one that syncs
    # per tensor (foreach.optimizer_rows)
    in_optimizer_loop: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # ensembles.ENSEMBLE_COLUMNS per step × direction with an ensemble called member by member; per
    # rank.gpu row the member count of the stretch that launched it (0: none)
    ensembles: pd.DataFrame = field(default_factory=ensembles.empty)
    ensemble_members: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ensemble_gpu_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank.gpu row: its µs, NaN outside
    ensemble_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row
    # per rank.gpu row of per-head stretches (heads.find_heads): its kernel works on the heads' shared input
    ensemble_shared: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # requests.REQUEST_COLUMNS per step served as repeated batch-1 forwards; in_requests their GPU rows
    requests: pd.DataFrame = field(default_factory=requests.empty)
    in_requests: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # accumulation.ACCUMULATION_COLUMNS per step that accumulates gradients over repeated forward+backward
    # passes; in_accumulation their GPU rows
    accumulation: pd.DataFrame = field(default_factory=accumulation.empty)
    in_accumulation: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # samples.SAMPLE_COLUMNS per step × thread with a per-sample loop; per rank.gpu row the varying
    # size of the repetition that launched it (0: none)
    sample_loops: pd.DataFrame = field(default_factory=samples.empty)
    sample_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sample_gpu_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank.gpu row: its µs in a loop, NaN outside
    # generation.GENERATION_COLUMNS per step × thread re-running the forward over a growing sequence per
    # token; per rank.gpu row the share of its work a one-position forward keeps (0: none of those forwards)
    generation: pd.DataFrame = field(default_factory=generation.empty)
    generation_share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    generation_gpu_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank.gpu row: its µs there, NaN outside
    # sdpa_fallback.FALLBACK_COLUMNS: SDPA calls with a misaligned head dim on a slow backend; per
    # rank.gpu row, their forward and backward kernels
    sdpa_fallback: pd.DataFrame = field(default_factory=sdpa_fallback.empty)
    in_sdpa_fallback: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # per rank.runtime row: a sync issued by the op call of a copy of `copies` (hostside.find_copy_syncs)
    copy_syncs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # per rank.gpu row: a kernel of an unfused attention (Patterns.attention), forward or backward
    in_attention: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # per rank.gpu row: a REDUCE_KERNEL kernel
    reduce_kernels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # cache_growth.GROWTH_COLUMNS per step × cache shape grown by torch.cat a few positions per call;
    # per rank.gpu row, a kernel of those cats
    cache_growth: pd.DataFrame = field(default_factory=cache_growth.empty)
    in_cache_growth: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # weight_convert.CONVERT_COLUMNS per step × static weight converted (to float8, from int8) every GEMM
    # call; per rank.gpu row a kernel of those conversions / of the GEMMs reading them; per rank.runtime
    # row a call the conversions issued
    weight_converts: pd.DataFrame = field(default_factory=weight_convert.empty)
    in_weight_convert: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    weight_consumers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    weight_convert_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # recompute.RECOMPUTE_COLUMNS per step whose backward re-runs checkpointed forwards; per rank.gpu
    # row a kernel of those re-runs, per rank.runtime row a call they issued
    recompute: pd.DataFrame = field(default_factory=recompute.empty)
    in_recompute: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    recompute_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    recompute_entry_us: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank.runtime row
    # anomaly.ANOMALY_COLUMNS per step with autograd anomaly checks, anomaly.CHECK_COLUMNS per check;
    # per rank.runtime row: issued by a forward op (its host gap holds the stack capture)
    anomaly: pd.DataFrame = field(default_factory=anomaly_mode.empty)
    anomaly_checks: pd.DataFrame = field(default_factory=anomaly_mode.empty_checks)
    forward_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    anomaly_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row: in a NaN check
    sync_in_anomaly: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per syncs row: a NaN check's
    # cleanup.CLEANUP_COLUMNS per step with cache releases, allocations or recorded collections;
    # cleanup.SPAN_COLUMNS: what removing them takes away; gc_recorded: the trace records every collection
    cleanup: pd.DataFrame = field(default_factory=step_cleanup.empty)
    cleanup_spans: pd.DataFrame = field(default_factory=step_cleanup.empty_spans)
    gc_recorded: bool = False
    runtime_tids: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank.runtime row: its thread
    debug_modes: tuple[tuple[str, bool], ...] = ()  # anomaly.debug_settings: what tracekit profile read
    # launch_blocking.LB_COLUMNS per step with kernel launches that return after their kernel (a rank
    # whose launches block); per rank.runtime row: such a launch (launch_blocking.blocking_calls)
    launch_blocking: pd.DataFrame = field(default_factory=sync_launch.empty)
    blocking_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # loader_respawn.LR_COLUMNS per step whose multi-process DataLoader iterator is created in it
    loader_respawn: pd.DataFrame = field(default_factory=loader_respawn.empty)
    # underfilled.UNDERFILLED_COLUMNS per kernel and grid launched in under-filled runs; per rank.gpu row, in one
    underfilled: pd.DataFrame = field(default_factory=underfilled.empty)
    in_underfilled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # gqa_expand.GQA_COLUMNS per step × shape; per rank.gpu row, an expansion copy / a matched attention kernel
    gqa_expand: pd.DataFrame = field(default_factory=gqa_expand.empty)
    gqa_copies: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    gqa_attention: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    gqa_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per rank.runtime row
    # full_logits.FULL_LOGITS_COLUMNS per step × logits shape; per rank.gpu row, a whole-logits kernel and its S
    full_logits: pd.DataFrame = field(default_factory=full_logits.empty)
    in_full_logits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    full_logits_positions: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # frozen_grads.FROZEN_COLUMNS per step; per rank.runtime row, a launch of backward past the last trained gradient
    frozen_grads: pd.DataFrame = field(default_factory=frozen_grads.empty)
    backward_passes: pd.DataFrame = field(default_factory=backward_passes.empty)  # PASSES_COLUMNS per step
    backward_factor: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per gpu row, with one pass
    frozen_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # l2_penalty.PENALTY_COLUMNS per step; per rank.runtime row, a call of the loss's L2 penalty (forward, backward)
    l2_penalty: pd.DataFrame = field(default_factory=l2_penalty.empty)
    l2_penalty_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def to_dict(self) -> dict[str, Any]:
        tables = ("chains", "loops", "attention", "syncs", "copies", "dataloader", "comm")
        return {"rank": self.rank, "num_sms": self.num_sms,
                **{name: records(getattr(self, name), {sequences.LP_SHAPES: format_shapes})
                   for name in tables}}


def _num_sms(meta: TraceMeta) -> int | None:
    value = meta.device.get("numSms") if isinstance(meta.device, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def find_patterns(rank: RankTrace, classification: KernelClassification,
                  costs: KernelCosts | None = None, *, plan: StepPlan | None = None) -> Patterns:
    """All patterns of one RankTrace; `classification` is kernels.classify(rank), `costs` the
    estimate_costs result (None: FLOP/byte columns stay unknown, loops are not searched).
    `plan` gives every row its step and limits the kernel sequences to the headline steps'
    activities (None: the trace's ProfilerStep columns, every row)."""
    windows = plan.windows if plan is not None else None
    rows = plan.gpu_rows if plan is not None else None
    steps = hostside.StepsOf.of(rank, windows)
    classes = classification.table[CLASS].to_numpy(dtype=object)
    libraries = classification.table[LIBRARY].to_numpy(dtype=object)
    fallback, in_fallback = sdpa_fallback.find_sdpa_fallback(rank, rows)
    # the math backend's scores GEMM → softmax → GEMM is SDPA already: the fallback rule prices it
    attention_rows = rows
    if in_fallback.any():
        in_steps = np.isin(rank.gpu[GPU_STEP].to_numpy(), rank.steps[STEP_NUMBER].to_numpy()) if len(rank.steps) else True
        attention_rows = (in_steps if rows is None else rows) & ~in_fallback
    unfused, covered = attention.find_attention(rank, classes, costs, rows=attention_rows)
    optimizer_steps, in_optimizer = optimizer.find_optimizer_steps(rank, steps)
    hosted, hosted_copies, hosted_calls, hosted_thread = offload.find_host_steps(rank, steps)
    llm_chains, in_llm_chain = layers.find_llm_chains(rank, classes, rows)
    compiled_steps, graph_breaks, backward_breaks, break_thread = dynamo.find_compiled(rank, steps)
    compile_spans = dynamo_compiles.find_recompiles(rank, steps)
    triton_launches, triton_rows = triton_launch.find_triton_launches(rank, rows)
    rnn_cells, rnn_rows = recurrent.find_rnn_cells(rank, classes, steps, costs, rows)
    lookups, lookup_rows = embeddings.find_embedding_lookups(rank, steps, costs, rows)
    top = toplevel.TopLevel.of(rank)  # shared by the per-step top-level op detectors
    foreach_loops, foreach_calls = foreach.find_foreach_loops(rank, steps, top)
    seqs = toplevel.step_sequences(rank, steps, top)
    served, in_requests = requests.find_requests(rank, steps, top, seqs)
    accumulating, in_accumulation = accumulation.find_accumulation(rank, steps)
    grown, in_grown = cache_growth.find_cache_growth(rank, steps, rows)
    converts = weight_convert.find_weight_converts(rank, steps, top, seqs, rows)
    recomputed = recompute.find_recompute(rank, steps, rows)
    masked = attention_mask.find_masked_attention(rank, classes, steps.gpu, steps.ops, rows)
    builds, in_build, build_thread = mask_build.find_mask_builds(rank, masked, steps, rows)
    anomaly_steps, anomaly_checks, forward_calls = anomaly_mode.find_anomaly(rank, steps)
    cleanup_steps, cleanup_spans = step_cleanup.find_cleanup(rank, steps)
    blocking = sync_launch.blocking_calls(rank)
    is_sync = np.isin(rank.runtime[tables.RT_KIND].to_numpy(dtype=object), tables.SYNC_KINDS) if len(rank.runtime) \
        else np.zeros(0, dtype=bool)
    in_checks = anomaly_mode.check_calls(rank, anomaly_checks)
    # passes with a backward each are one model's micro-batches or per-sample gradients, not an ensemble
    ensemble_loops, ensemble_members, ensemble_gpu_us, ensemble_calls = ensembles.find_ensembles(
        rank, classes, steps, skip=in_requests | in_accumulation if len(in_accumulation) == len(in_requests) else in_requests)
    # attention heads as separate modules: batch_bmm's ensemble evidence too (stacked weights, one call)
    head_loops, head_members, head_gpu_us, ensemble_shared, head_calls = heads.find_heads(rank, classes, steps,
                                                                                       skip=in_requests)
    if len(head_loops):
        free = ensemble_members == 0
        ensemble_loops = head_loops if not len(ensemble_loops) else pd.concat([ensemble_loops, head_loops], ignore_index=True)
        ensemble_members = np.where(free, head_members, ensemble_members)
        ensemble_gpu_us = np.where(free, head_gpu_us, ensemble_gpu_us)
        ensemble_calls = ensemble_calls | head_calls
        ensemble_shared = ensemble_shared & free
    sample_loops, sample_sizes, sample_gpu_us = samples.find_sample_loops(rank, steps, top, seqs)
    regenerated, generation_share, generation_gpu_us = generation.find_generation(rank, steps, top, seqs)
    num_sms = _num_sms(rank.meta)
    under, in_under = underfilled.find_underfilled(rank, classes, num_sms, rows)
    gqa = gqa_expand.find_gqa_expand(rank, steps.ops, rows)
    logits = full_logits.find_full_logits(rank, steps.ops, rows)
    frozen = frozen_grads.find_frozen_grads(rank, steps.ops)
    passes, pass_factor = backward_passes.find_backward_passes(rank, steps, top)
    penalty = l2_penalty.find_l2_penalty(rank, steps, top)
    return Patterns(
        rank=int(rank.rank),
        num_sms=num_sms,
        chains=sequences.find_chains(rank, classes, libraries, costs, skip=covered | in_fallback, rows=rows),
        loops=sequences.find_loops(rank, classes, costs, rows=rows),
        attention=unfused,
        in_attention=covered,
        syncs=hostside.find_syncs(rank, steps),
        copies=hostside.find_copies(rank, steps),
        copy_syncs=hostside.find_copy_syncs(rank, steps),
        dataloader=hostside.find_dataloader(rank, steps),
        comm=hostside.find_comm(rank, classes, steps),
        training=bool(len(rank.ops)) and bool(names.matches(rank.ops[OP_NAME], TRAINING).any()),
        optimizer=optimizer_steps,
        in_optimizer=in_optimizer,
        offload=hosted,
        offload_copies=hosted_copies,
        offload_calls=hosted_calls,
        offload_thread=hosted_thread,
        masked_attention=masked,
        mask_builds=builds,
        in_mask_build=in_build,
        mask_build_thread=build_thread,
        host_gaps=hostside.find_host_gaps(rank, steps),
        layout_transposes=layers.find_layout_transposes(rank),
        llm_chains=llm_chains,
        in_llm_chain=in_llm_chain,
        compiled=compiled_steps,
        graph_breaks=graph_breaks,
        backward_breaks=backward_breaks,
        recompiles=compile_spans,
        break_thread=break_thread,
        triton_launches=triton_launches,
        triton_rows=triton_rows,
        gemm_layouts=gemm_layout.find_gemm_layouts(rank, classes, rows),
        rnn_cells=rnn_cells,
        rnn_rows=rnn_rows,
        embedding_lookups=lookups,
        embedding_rows=lookup_rows,
        foreach_loops=foreach_loops,
        foreach_calls=foreach_calls,
        sync_in_loop=foreach_calls[is_sync] >= 0 if len(rank.runtime) else np.zeros(0, dtype=bool),
        in_optimizer_loop=foreach.optimizer_rows(rank, foreach_loops, foreach_calls),
        ensembles=ensemble_loops,
        ensemble_members=ensemble_members,
        ensemble_gpu_us=ensemble_gpu_us,
        ensemble_calls=ensemble_calls,
        ensemble_shared=ensemble_shared,
        requests=served,
        in_requests=in_requests,
        accumulation=accumulating,
        in_accumulation=in_accumulation,
        sample_loops=sample_loops,
        sample_sizes=sample_sizes,
        sample_gpu_us=sample_gpu_us,
        generation=regenerated,
        generation_share=generation_share,
        generation_gpu_us=generation_gpu_us,
        sdpa_fallback=fallback,
        in_sdpa_fallback=in_fallback,
        reduce_kernels=names.matches(rank.gpu[GPU_NAME].to_numpy(dtype=object), REDUCE_KERNEL) if len(rank.gpu)
        else np.zeros(0, dtype=bool),
        cache_growth=grown,
        in_cache_growth=in_grown,
        weight_converts=converts.table,
        in_weight_convert=converts.in_convert,
        weight_consumers=converts.consumers,
        weight_convert_calls=converts.calls,
        recompute=recomputed.table,
        in_recompute=recomputed.in_recompute,
        recompute_calls=recomputed.calls,
        recompute_entry_us=recomputed.entry_cut_us,
        anomaly=anomaly_steps,
        anomaly_checks=anomaly_checks,
        forward_calls=forward_calls,
        anomaly_calls=in_checks,
        sync_in_anomaly=in_checks[is_sync] if len(in_checks) else np.zeros(0, dtype=bool),
        cleanup=cleanup_steps,
        cleanup_spans=cleanup_spans,
        gc_recorded=step_cleanup.gc_recorded(rank),
        runtime_tids=rank.runtime[tables.RT_TID].to_numpy() if len(cleanup_spans) or len(anomaly_checks) or len(compile_spans) else np.zeros(0),
        debug_modes=anomaly_mode.debug_settings(rank),
        launch_blocking=sync_launch.find_launch_blocking(rank, steps, blocking),
        loader_respawn=loader_respawn.find_loader_respawn(rank, steps),
        blocking_calls=blocking,
        underfilled=under,
        in_underfilled=in_under,
        gqa_expand=gqa.table,
        gqa_copies=gqa.copies,
        gqa_attention=gqa.attention,
        gqa_calls=gqa.calls,
        full_logits=logits.table,
        in_full_logits=logits.rows,
        full_logits_positions=logits.positions,
        frozen_grads=frozen.table,
        backward_passes=passes,
        backward_factor=pass_factor,
        frozen_calls=frozen.calls,
        l2_penalty=penalty.table, l2_penalty_calls=penalty.calls,
    )
