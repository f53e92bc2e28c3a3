"""Every pattern detector of one rank run in order, their results bundled in a `Patterns` (patterns.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.analyzers import names
from tracekit.analyzers.costs.attribution import KernelCosts
from tracekit.analyzers.detectors import (
    accumulation,
    attention,
    attention_mask,
    attention_plans,
    autocast_weights,
    autotune,
    backward_passes,
    broadcast_distance,
    cache_growth,
    calibration,
    context_projection,
    embeddings,
    ensembles,
    ensembles_inference,
    expanded_bmm,
    foreach,
    frozen_grads,
    full_logits,
    gemm_layout,
    generation,
    gqa_expand,
    grad_recording,
    graph_inputs,
    heads,
    host_reductions,
    hostside,
    item_reads,
    l2_penalty,
    layers,
    loader_respawn,
    mask_build,
    offload,
    optimizer,
    pair_concat,
    recompute,
    recurrent,
    requests,
    samples,
    sdpa_fallback,
    sequences,
    sparse_products,
    static_cache,
    strided_reads,
    sync_reads,
    table_grads,
    toplevel,
    triton_launch,
    triton_passes,
    triton_rebuild,
    underfilled,
    unfold_conv,
    value_checks,
    weight_convert,
    weight_norm,
    window_shift,
    zeroed_grads,
)
from tracekit.analyzers.detectors import anomaly as anomaly_mode
from tracekit.analyzers.detectors import cleanup as step_cleanup
from tracekit.analyzers.detectors import compiled as dynamo
from tracekit.analyzers.detectors import launch_blocking as sync_launch
from tracekit.analyzers.detectors import recompiles as dynamo_compiles
from tracekit.analyzers.detectors.patterns import Patterns
from tracekit.analyzers.kernels import CLASS, LIBRARY, KernelClassification
from tracekit.trace import tables
from tracekit.trace.model import RankTrace, TraceMeta
from tracekit.trace.tables import GPU_NAME, GPU_STEP, OP_NAME, STEP_NUMBER

if TYPE_CHECKING:
    from tracekit.analyzers.step_plan import StepPlan

TRAINING = re.compile(r"Backward|^autograd::engine|^Optimizer\.step")
# torch's TensorIterator reductions (sum, mean, var, amax...): what Inductor fuses with the pointwise
# ops around them into one reduction kernel (not sorts, scans, pooling or losses, also class reduction)
REDUCE_KERNEL = re.compile(r"at::native::reduce_kernel<")


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
    converts = weight_convert.merged(weight_convert.find_weight_converts(rank, steps, top, seqs, rows),
                                     autocast_weights.find_autocast_weights(rank, steps, rows))
    recomputed = recompute.find_recompute(rank, steps, rows)
    masked = attention_mask.find_masked_attention(rank, classes, steps.gpu, steps.ops, rows)
    builds, in_build, build_thread = mask_build.find_mask_builds(rank, masked, steps, rows)
    anomaly_steps, anomaly_checks, forward_calls = anomaly_mode.find_anomaly(rank, steps)
    cleanup_steps, cleanup_spans = step_cleanup.find_cleanup(rank, steps)
    blocking = sync_launch.blocking_calls(rank)
    read_group, round_trip = sync_reads.find_sync_read_calls(rank)
    is_sync = np.isin(rank.runtime[tables.RT_KIND].to_numpy(dtype=object), tables.SYNC_KINDS) if len(rank.runtime) \
        else np.zeros(0, dtype=bool)
    in_checks = anomaly_mode.check_calls(rank, anomaly_checks)
    # passes with a backward each are one model's micro-batches or per-sample gradients, not an ensemble
    ensemble_loops, ensemble_members, ensemble_gpu_us, ensemble_calls = ensembles.find_ensembles(
        rank, classes, steps, skip=in_requests | in_accumulation if len(in_accumulation) == len(in_requests) else in_requests)
    if not len(ensemble_loops):  # inference: the members' outputs joined by one stack (no backward to read)
        ensemble_loops, ensemble_members, ensemble_gpu_us, ensemble_calls = ensembles_inference.find_inference_ensembles(
            rank, classes, steps, skip=in_requests)
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
    # the forwards repeated in a step, searched once for the two decoding-loop detectors (same thresholds)
    bodies = list(toplevel.launching_bodies(seqs, top.launches, rank.ops[OP_NAME].to_numpy(dtype=object),
                                            generation.MIN_FORWARDS, generation.MIN_BODY_OPS))
    regenerated, generation_share, generation_gpu_us = generation.find_generation(rank, steps, top, seqs, bodies)
    num_sms = _num_sms(rank.meta)
    under, in_under = underfilled.find_underfilled(rank, classes, num_sms, rows)
    gqa = gqa_expand.find_gqa_expand(rank, steps.ops, rows)
    logits = full_logits.find_full_logits(rank, steps.ops, rows)
    frozen = frozen_grads.find_frozen_grads(rank, steps.ops)
    passes, pass_factor = backward_passes.find_backward_passes(rank, steps, top)
    penalty = l2_penalty.find_l2_penalty(rank, steps, top)
    unfolded = unfold_conv.find_unfold_convs(rank, classes, steps, rows)
    context = context_projection.find_context_projections(rank, steps, top, seqs, bodies)
    tuning = autotune.find_autotune(rank, steps, triton_rows)
    distances = broadcast_distance.find_broadcast_distances(rank, steps.ops, top, rows)
    cached = static_cache.find_static_cache(rank, classes, steps.ops, rows)
    reads = item_reads.find_item_reads(rank, steps)
    checks = value_checks.find_value_checks(rank, seqs, top)
    calibrating = calibration.find_calibration(rank, seqs, top)
    norms = weight_norm.find_weight_norms(rank, seqs, top)
    shifts = window_shift.find_window_shifts(rank, seqs, top)
    pairs = pair_concat.find_pair_concats(rank, steps)
    rebuilt = triton_rebuild.find_triton_rebuilds(rank, steps)
    plans = attention_plans.find_attention_plans(rank, steps)
    grads = grad_recording.find_grad_recording(rank, steps)
    zeroed = zeroed_grads.find_zeroed_grads(rank, steps)
    passes_over = triton_passes.find_triton_passes(rank, steps, triton_rows)
    strided = strided_reads.find_strided_reads(rank, classes, steps, costs, rows)
    tables_swept = table_grads.find_table_grads(rank, steps, rows)
    sparse = sparse_products.find_sparse_products(rank, libraries, steps, rows)
    expanded = expanded_bmm.find_expanded_bmm(rank, classes, steps, rows)
    graph_copies = graph_inputs.find_graph_inputs(rank, steps, rows)
    reduced_on_host = host_reductions.find_host_reductions(rank, steps, top, rows)
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
        copy_back_calls=item_reads.find_copy_back_calls(rank, steps),
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
        in_compiled_graph=dynamo.in_compiled_graphs(rank, steps),
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
        unfold_conv=unfolded.table, in_unfold_conv=unfolded.rows,
        context_projection=context.table, context_calls=context.calls,
        autotune=tuning.table, autotune_calls=tuning.calls,
        broadcast_distance=distances.table, in_broadcast_distance=distances.rows,
        static_cache=cached.table, static_cache_share=cached.share, static_cache_gone=cached.gone,
        static_cache_calls=cached.calls,
        item_reads=reads.table, item_read_calls=reads.calls,
        sync_read_group=read_group,
        sync_round_trip=round_trip[is_sync] if len(rank.runtime) else np.zeros(0, dtype=bool),
        sync_in_reads=reads.calls[is_sync] if len(rank.runtime) else np.zeros(0, dtype=bool),
        value_checks=checks.table, value_check_calls=checks.calls,
        sync_in_checks=checks.calls[is_sync] if len(rank.runtime) else np.zeros(0, dtype=bool),
        calibration=calibrating.table, calibration_calls=calibrating.calls,
        weight_norm=norms.table, weight_norm_calls=norms.calls,
        window_shift=shifts.table, window_shift_calls=shifts.calls,
        pair_concat=pairs.table, in_pair_concat=pairs.rows,
        triton_rebuild=rebuilt.table, triton_rebuild_cut_us=rebuilt.cut_us,
        attention_plans=plans.table, attention_plan_cut_us=plans.cut_us,
        rebuild_spans=np.concatenate((rebuilt.spans, plans.spans)),
        compiled_spans=dynamo.region_spans(rank),
        grad_recording=grads.table, grad_recording_cut_us=grads.cut_us,
        zeroed_grads=zeroed.table, zeroed_grad_calls=zeroed.calls,
        triton_passes=passes_over.table, triton_pass_calls=passes_over.calls,
        strided_reads=strided.table, read_stride=strided.stride,
        table_grads=tables_swept.table, table_sweep=tables_swept.share,
        sparse_products=sparse.table, sparse_part=sparse.part, sparse_call=sparse.call, sparse_calls=sparse.calls,
        expanded_bmm=expanded.table, expanded_part=expanded.part, expanded_touched=expanded.touched,
        expanded_us=expanded.us, expanded_step=expanded.step,
        graph_inputs=graph_copies.table, graph_input_calls=graph_copies.calls, host_reductions=reduced_on_host,
        sync_in_calibration=calibrating.calls[is_sync] if len(rank.runtime) else np.zeros(0, dtype=bool),
    )
