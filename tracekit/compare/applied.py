"""Whether the AFTER trace shows the change a suggestion of BEFORE asked for: one row of signals per rule id (compare/signals.py), read from the two analyses."""

from __future__ import annotations

from tracekit.analyzers import kernels
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import (
    anomaly,
    attention_mask,
    attention_plans,
    autotune,
    backward_passes,
    broadcast_distance,
    cache_growth,
    calibration,
    cleanup,
    context_projection,
    embeddings,
    ensembles,
    expanded_bmm,
    foreach,
    frozen_grads,
    full_logits,
    generation,
    gqa_expand,
    grad_recording,
    graph_inputs,
    host_reductions,
    item_reads,
    l2_penalty,
    launch_blocking,
    layers,
    loader_respawn,
    offload,
    optimizer,
    pair_concat,
    recompiles,
    recompute,
    recurrent,
    requests,
    samples,
    sequences,
    sparse_products,
    static_cache,
    strided_reads,
    table_grads,
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
from tracekit.compare.signals import (
    BECOMES,
    CHANGES,
    FALLS,
    GROWS,
    SHARE,
    TIME,
    WORD,
    Applied,
    Signal,
    class_count,
    class_time,
    gemm_precision,
    graph_breaks_per_step,
    graph_share,
    layout_transpose_time,
    library_count,
    micro_batches_per_step,
    optimizer_kernels,
    optimizer_kind,
    pattern_sum,
    single_process_loads,
    steps_of,
    steps_sum,
    totals_field,
    triton_launch_config,
)
from tracekit.suggestions.rules_align import misaligned_calls
from tracekit.suggestions.rules_int4 import int4_large_calls

APPLIED: dict[str, tuple[Signal, ...]] = {
    # rules_launch.cuda_graphs: capture the step and replay it (torch.cuda.graphs, mode="reduce-overhead"):
    # the AFTER trace then runs its kernels from graph launches (GraphReplays of each rank).
    "cuda_graphs": (Signal("GPU activities replayed from CUDA graphs", graph_share, GROWS, 2.0, unit=SHARE),),
    # rules_host.avoid_sync: drop the per-step .item() / .cpu() / explicit syncs (LaunchTotals.syncs).
    "avoid_sync": (Signal("host syncs per steady step", totals_field("syncs"), FALLS, 0.25),),
    # rules_host.dataloader_workers: num_workers > 0 takes the loading off the training thread: the
    # DataLoader wait (LaunchTotals.data_wait_us) halves, or the single-process iterator is gone.
    "dataloader_workers": (
        Signal("DataLoader wait per step", totals_field("data_wait_us"), FALLS, 0.5, unit=TIME),
        Signal("single-process DataLoader loads per step", single_process_loads, FALLS, 1.0)),
    # rules_python.preprocess_off_thread: the preprocessing moves to workers or a thread: the GPU idle
    # while the CPU works between launches (LaunchTotals.cpu_wait_us) halves.
    "preprocess_off_thread": (Signal("GPU idle while the CPU works per step", totals_field("cpu_wait_us"), FALLS, 0.5,
                                     unit=TIME),),
    # rules_host.pinned_memory: pin_memory=True / non_blocking copies: pageable copy time halves.
    "pinned_memory": (Signal("pageable copy time per step", totals_field("pageable_copy_us"), FALLS, 0.5, unit=TIME),),
    # rules_optimizer.fused_optimizer: fused=True updates all parameters in a few kernels
    # (detectors/optimizer.py OS_KERNELS, OS_KIND): kernels per optimizer step fall 4×, or the kind is fused.
    "fused_optimizer": (Signal("kernels per optimizer step", optimizer_kernels, FALLS, 0.75),
                        Signal("optimizer update", optimizer_kind, BECOMES, target=optimizer.FUSED_KIND, unit=WORD)),
    # rules_offload.optimizer_on_gpu: the optimizer steps on the GPU's parameters: no Optimizer.step range
    # runs on the host between gradient and weight copies any more (detectors/offload.py).
    "optimizer_on_gpu": (Signal("optimizer steps run on the host per step", steps_sum("offload", offload.OF_STEP),
                                FALLS, 1.0),),
    # rules_kernels.lower_precision: TF32 / bf16 autocast: the GEMMs run other kernels (tf32/bf16 names or
    # input dtype in Analysis.kernels), or GEMM time falls by 30 %.
    "lower_precision": (Signal("GEMM precision (by time)", gemm_precision, CHANGES, unit=WORD),
                        Signal("GEMM time per step", class_time(kernels.GEMM), FALLS, 0.3, unit=TIME)),
    # rules_launch.batch_bmm: one batched GEMM instead of a loop: the same-shape GEMM loops
    # (patterns.loops, their kernels) vanish, or the ensemble members' stretches (patterns.ensembles) do.
    "batch_bmm": (Signal("GEMMs in same-shape loops per step", pattern_sum("loops", sequences.LP_GEMMS), FALLS, 1.0),
                  Signal("GEMMs of ensemble members called one by one per step",
                         pattern_sum("ensembles", ensembles.EN_GEMMS), FALLS, 1.0)),
    # rules_kernels.fuse_elementwise: torch.compile / fused ops: fewer elementwise + normalization kernels.
    "fuse_elementwise": (Signal("elementwise + normalization kernels per step",
                                class_count(kernels.ELEMENTWISE, kernels.NORMALIZATION), FALLS, 0.3,
                                requires=(Signal("generated (Inductor, Triton) kernels per step",
                                                 library_count(*sequences.PREFUSED_LIBRARIES), GROWS, 1.25),)),),
    # rules_kernels.use_sdpa: F.scaled_dot_product_attention: fused attention kernels (class attention)
    # replace the unfused scores GEMM → softmax → GEMM chain (patterns.attention).
    "use_sdpa": (Signal("fused attention kernels per step", class_count(kernels.ATTENTION), GROWS, 2.0),),
    # rules_attention.causal_mask: is_causal=True instead of a square attn_mask: the masked square SDPA
    # calls (patterns.masked_attention) vanish, or attention kernel time falls by 30 % (the skipped half).
    "causal_mask": (Signal("masked square SDPA calls per step",
                           pattern_sum("masked_attention", attention_mask.MA_CALLS), FALLS, 1.0),
                    Signal("attention kernel time per step", class_time(kernels.ATTENTION), FALLS, 0.3, unit=TIME)),
    # rules_compile.graph_breaks: fullgraph / tensor ops instead of .item(): the breaks between compiled
    # graphs (patterns.graph_breaks) fall by three quarters.
    "graph_breaks": (Signal("graph breaks per step", graph_breaks_per_step, FALLS, 0.75),),
    # rules_compile.recompiles: dynamic shapes or shape buckets: no frame compiles inside the steps.
    "recompiles": (Signal("frame compiles per step", steps_sum("recompiles", recompiles.RC_STEP, recompiles.RC_FRAMES),
                          FALLS, 1.0),),
    # rules_align.align_dims: padded shapes: no GEMM call is off alignment any more (leading dims from the
    # strides, alignN / older-architecture kernel names, N or K).
    "align_dims": (Signal("GEMM calls off alignment per step", misaligned_calls, FALLS, 1.0),),
    # rules_triton.triton_config: @triton.autotune / other tiles: the user Triton kernels' time halves, or
    # the launch configuration most of their time runs with changes (a memory-bound kernel gains less).
    "triton_config": (Signal("user Triton kernel time per step", pattern_sum("triton_launches", triton_launch.TL_TIME_US),
                             FALLS, 0.5, unit=TIME),
                      Signal("user Triton launch configuration (by time)", triton_launch_config, CHANGES, unit=WORD)),
    # rules_host.overlap_comm: bucketing / async collectives: exposed communication (LaunchTotals.comm_exposed_us) halves.
    "overlap_comm": (Signal("exposed communication per step", totals_field("comm_exposed_us"), FALLS, 0.5, unit=TIME),),
    # rules_precision.channels_last: the model and input in channels_last: cuDNN's layout transposes vanish.
    "channels_last": (Signal("NCHW ↔ NHWC transpose time per step", layout_transpose_time, FALLS, 1.0, unit=TIME),),
    # rules_decode.quantize_weights: int8/int4 weights: the GEMV kernels read fewer bytes, so GEMM time
    # falls by 30 % (dequantizing GEMVs compiled by Inductor are reductions, not GEMMs: they fall further).
    "quantize_weights": (Signal("GEMM time per step", class_time(kernels.GEMM), FALLS, 0.3, unit=TIME),),
    # rules_int4.int4_large_batch: bf16 weights (F.linear) for large M: no int4 GEMM call with M ≥ 256 is left.
    "int4_large_batch": (Signal("int4 GEMM calls with M ≥ 256 per step", lambda a: int4_large_calls(a) / steps_of(a),
                                FALLS, 1.0),),
    # rules_llm.fused_llm_kernels: fused kernels launch none of the chains' aten ops: their kernels
    # (patterns.llm_chains) fall to a quarter.
    "fused_llm_kernels": (Signal("unfused LLM chain kernels per step", pattern_sum("llm_chains", layers.LC_KERNELS),
                                 FALLS, 0.75),),
    # rules_loops.cudnn_rnn: nn.LSTM / nn.GRU over the sequence: no RNN cell call is left (patterns.rnn_cells).
    "cudnn_rnn": (Signal("RNN cell calls per step", pattern_sum("rnn_cells", recurrent.RC_CALLS), FALLS, 1.0),),
    # rules_loops.concat_embeddings: one table: lookup calls (patterns.embedding_lookups) fall to a quarter.
    "concat_embeddings": (Signal("embedding lookup calls per step", pattern_sum("embedding_lookups", embeddings.EL_CALLS),
                                 FALLS, 0.75),),
    # rules_cache.preallocate_kv_cache: a buffer allocated once and written in place: no torch.cat grows
    # a cache a few positions per call any more (patterns.cache_growth).
    "preallocate_kv_cache": (Signal("cache-growing torch.cat calls per step",
                                    steps_sum("cache_growth", cache_growth.CG_STEP, cache_growth.CG_CALLS), FALLS, 1.0),),
    # rules_cache.use_kv_cache: a KV cache: no forward re-runs the growing sequence per token (patterns.generation),
    # or no forward after the first projects the fixed context again (patterns.context_projection).
    "use_kv_cache": (Signal("forwards over the whole sequence per step",
                            steps_sum("generation", generation.GN_STEP, generation.GN_FORWARDS), FALLS, 1.0),
                     Signal("forwards projecting the fixed context again per step",
                            steps_sum("context_projection", context_projection.CX_STEP, context_projection.CX_FORWARDS),
                            FALLS, 1.0)),
    # rules_convert.convert_weights_once: no GEMM call converts its weight per call (patterns.weight_converts).
    "convert_weights_once": (Signal("GEMM calls converting their weight per step",
                                    steps_sum("weight_converts", weight_convert.WC_STEP, weight_convert.WC_CALLS),
                                    FALLS, 1.0),),
    # rules_recompute.drop_checkpointing: no forward op is re-run in backward any more (patterns.recompute).
    "drop_checkpointing": (Signal("forward ops re-run in backward per step",
                                  steps_sum("recompute", recompute.RC_STEP, recompute.RC_OPS), FALLS, 1.0),),
    # rules_batching.foreach_loops: torch._foreach_* ops instead of the Python loops: the per-tensor calls
    # of the loops (patterns.foreach_loops) fall to a quarter.
    "foreach_loops": (Signal("per-tensor loop calls per step", steps_sum("foreach_loops", foreach.FL_STEP, foreach.FL_CALLS),
                             FALLS, 0.75),),
    # rules_batching.batch_requests: one forward at batch k: the steps served as repeated batch-1 forwards vanish.
    "batch_requests": (Signal("repeated forwards per step (batch-1 requests, or per round)", steps_sum("requests", requests.RQ_STEP, requests.RQ_REQUESTS),
                              FALLS, 1.0),),
    # rules_memory.larger_batch (gradient accumulation): fewer, larger micro-batches: the forward+backward
    # passes per optimizer step (patterns.accumulation) halve or more (the memory-only case: no check of its own).
    "larger_batch": (Signal("forward+backward passes per optimizer step", micro_batches_per_step, FALLS, 0.5),),
    # rules_batching.batch_samples: the samples padded and run once: the per-sample loops' repetitions vanish.
    "batch_samples": (Signal("per-sample loop repetitions per step",
                             steps_sum("sample_loops", samples.SL_STEP, samples.SL_SAMPLES), FALLS, 1.0),
                      # per-sample gradients (rules_memory.per_sample_gradients): the passes become one
                      Signal("per-sample forward+backward passes per step", micro_batches_per_step, FALLS, 0.5)),
    # rules_debug: anomaly detection off: the backward NaN checks vanish; no per-step empty_cache(): the
    # releases (cudaFree bursts outside ops) vanish; no per-step gc.collect(): the recorded pauses halve.
    "anomaly_mode": (Signal("anomaly NaN checks per step", steps_sum("anomaly", anomaly.AN_STEP, anomaly.AN_CHECKS),
                            FALLS, 1.0),),
    # no synchronous launches: the kernel launch calls that return after their kernel vanish
    # rules_loader.reuse_dataloader: the loader built once: no multi-process iterator is created per step.
    "reuse_dataloader": (Signal("DataLoader iterators created per step",
                                steps_sum("loader_respawn", loader_respawn.LR_STEP), FALLS, 1.0),),
    # the sixth held-out set's rules: the pattern each one prices is gone from AFTER
    "merge_launches": (Signal("launches in under-filled runs per step", pattern_sum("underfilled", underfilled.UF_KERNELS),
                              FALLS, 1.0),),
    "enable_gqa": (Signal("K/V expansion copies per step", steps_sum("gqa_expand", gqa_expand.GQ_STEP, gqa_expand.GQ_COPIES),
                          FALLS, 1.0),),
    "last_logits": (Signal("steps projecting every position's logits", steps_sum("full_logits", full_logits.FL_STEP),
                           FALLS, 1.0),),
    "freeze_params": (Signal("gradients no optimizer reads per step",
                             steps_sum("frozen_grads", frozen_grads.FG_STEP, frozen_grads.FG_UNREAD), FALLS, 1.0),),
    # rules_optimizer.weight_decay: the optimizer's weight_decay instead: no tensor is squared into the loss
    "weight_decay": (Signal("parameter tensors squared into the loss per step",
                            steps_sum("l2_penalty", l2_penalty.LP_STEP, l2_penalty.LP_TENSORS), FALLS, 1.0),),
    # rules_recompute.single_backward: one backward over the summed losses: no step runs it more than once
    "single_backward": (Signal("steps whose backward runs more than once",
                               steps_sum("backward_passes", backward_passes.BP_STEP), FALLS, 1.0),),
    # rules_triton.autotune_once: the autotuner tuned once: no benchmark window is left in the steps
    "autotune_once": (Signal("L2 flushes of the autotuner's benchmark per step",
                             steps_sum("autotune", autotune.AT_STEP, autotune.AT_FLUSHES), FALLS, 1.0),),
    # rules_conv.distance_gemm: distances as a GEMM: no broadcast-difference chain is left in the steps
    "distance_gemm": (Signal("broadcast-difference distance chains per step",
                             steps_sum("broadcast_distance", broadcast_distance.BD_STEP, broadcast_distance.BD_CALLS),
                             FALLS, 1.0),),
    # rules_attention.filled_cache: attention over the filled prefix: no decoding call reads a whole masked cache
    "filled_cache": (Signal("decoding attention calls over a whole masked cache per step",
                            steps_sum("static_cache", static_cache.SC_STEP, static_cache.SC_CALLS), FALLS, 1.0),),
    # rules_host.read_once: results read once: no per-item read loop is left in the steps
    "read_once": (Signal("per-item device-to-host reads per step",
                         steps_sum("item_reads", item_reads.IR_STEP, item_reads.IR_READS), FALLS, 1.0),),
    # rules_host.drop_checks: the checks are out of the loop: no step reads a check's boolean on the host
    "drop_checks": (Signal("value checks read on the host per step",
                           steps_sum("value_checks", value_checks.VC_STEP, value_checks.VC_CHECKS), FALLS, 1.0),),
    # rules_leftover.calibration_off: calibration switched off: no calibrator histogram is left in the steps
    "calibration_off": (Signal("calibrator histograms per step",
                               steps_sum("calibration", calibration.CB_STEP, calibration.CB_CALIBRATORS), FALLS, 1.0),),
    # rules_leftover.remove_weight_norm: the weights computed once: no weight-norm op is left in the steps
    "remove_weight_norm": (Signal("weight-normalisation recomputations per step",
                                  steps_sum("weight_norm", weight_norm.WN_STEP, weight_norm.WN_NORMS), FALLS, 1.0),),
    # rules_cache.ring_buffer_cache: each token written in place: no step rewrites a decoding cache whole
    "ring_buffer_cache": (Signal("whole-cache rewrites per step",
                                 steps_sum("window_shift", window_shift.WS_STEP, window_shift.WS_REWRITES), FALLS, 1.0),),
    # rules_pairs.split_pair_linear: the weight split: no pair concatenation feeds a Linear in the steps
    "split_pair_linear": (Signal("pair concatenations into a Linear per step",
                                 steps_sum("pair_concat", pair_concat.PC_STEP, pair_concat.PC_CALLS), FALLS, 1.0),),
    # rules_leftover.inference_mode: grad off in the loop: no autograd node is created in an inference step
    "inference_mode": (Signal("autograd nodes recorded per inference step",
                              steps_sum("grad_recording", grad_recording.GR_STEP, grad_recording.GR_NODES), FALLS, 1.0),),
    # rules_rebuild.define_kernel_once: the kernel defined once: no launch of it makes a new kernel object
    "define_kernel_once": (Signal("Triton kernel objects made per step",
                                  steps_sum("triton_rebuild", triton_rebuild.TR_STEP, triton_rebuild.TR_OBJECTS), FALLS, 1.0),),
    # rules_rebuild.attention_plans: another backend (or fixed shapes): no cuDNN attention plan is built in the steps
    "attention_plans": (Signal("cuDNN attention plans built per step",
                               steps_sum("attention_plans", attention_plans.AP_STEP, attention_plans.AP_BUILDS), FALLS, 1.0),),
    # rules_optimizer.grads_to_none: gradients freed: no zero_grad range zeroes gradients in the steps
    "grads_to_none": (Signal("gradients zeroed per step",
                             steps_sum("zeroed_grads", zeroed_grads.ZG_STEP, zeroed_grads.ZG_ZEROED), FALLS, 1.0),),
    # rules_triton.fuse_triton_passes: one kernel: no run of Triton passes over one tensor is left in the steps
    "fuse_triton_passes": (Signal("runs of Triton passes over one tensor per step",
                                  steps_sum("triton_passes", triton_passes.TP_STEP, triton_passes.TP_RUNS), FALLS, 1.0),),
    # rules_fields.soa_layout: fields stored apart: no element-wise kernel reads a strided column in the steps
    "soa_layout": (Signal("element-wise kernels reading strided columns per step",
                          steps_sum("strided_reads", strided_reads.SR_STEP, strided_reads.SR_KERNELS), FALLS, 1.0),),
    # rules_host.reduce_on_gpu: reduced on the GPU: no large device-to-host copy is reduced on the host in the steps
    "reduce_on_gpu": (Signal("large device-to-host copies reduced on the host per step",
                             steps_sum("host_reductions", host_reductions.HR_STEP, host_reductions.HR_BYTES), FALLS, 1.0),),
    # rules_compile.static_graph_inputs: static inputs: the graph-input copies' GPU time falls in the steps
    "static_graph_inputs": (Signal("GPU µs of inputs copied into CUDA graphs per step",
                                   steps_sum("graph_inputs", graph_inputs.GI_STEP, graph_inputs.GI_US), FALLS, 0.5,
                                   unit=TIME),),
    # rules_expand.flatten_bmm: one flattened matmul: no call multiplies by a batch-expanded weight in the steps
    "flatten_bmm": (Signal("calls on a batch-expanded weight per step",
                           steps_sum("expanded_bmm", expanded_bmm.EB_STEP, expanded_bmm.EB_CALLS), FALLS, 1.0),),
    # rules_sparse.sparse_format: a CSR (or dense) operand: no sparse product coalesces its operand in the steps
    "sparse_format": (Signal("sparse products coalescing their operand per step",
                             steps_sum("sparse_products", sparse_products.SP_STEP, sparse_products.SP_COALESCED), FALLS, 1.0),),
    # rules_tables.sparse_grads: sparse gradients: no kernel sweeps a dense-gradient table in the steps
    "sparse_grads": (Signal("kernels sweeping a whole embedding table per step",
                            steps_sum("table_grads", table_grads.TG_STEP, table_grads.TG_KERNELS), FALLS, 1.0),),
    # rules_conv.use_conv2d: a native convolution: no im2col / col2im call is left in the steps
    "use_conv2d": (Signal("im2col / col2im calls per step",
                          steps_sum("unfold_conv", unfold_conv.UC_STEP, unfold_conv.UC_IM2COL), FALLS, 1.0),),
    "launch_blocking": (Signal("kernel launches returning after their kernel per step",
                               steps_sum("launch_blocking", launch_blocking.LB_STEP, launch_blocking.LB_BLOCKED),
                               FALLS, 1.0),),
    "empty_cache": (Signal("CUDA cache releases per step", steps_sum("cleanup", cleanup.CL_STEP, cleanup.CL_RELEASES),
                           FALLS, 1.0),),
    "gc_collect": (Signal("garbage-collection pause per step", steps_sum("cleanup", cleanup.CL_STEP, cleanup.CL_GC_US),
                          FALLS, 0.5, unit=TIME),),
}


def applied(suggestion_id: str, before: Analysis, after: Analysis) -> Applied:
    """Whether AFTER shows the change `suggestion_id` asks for: made when any signal of its row fired
    (with every signal it `requires`); not made when every signal could be read and none fired; None
    for an id without a row, or when no signal could be read."""
    signals = APPLIED.get(suggestion_id)
    if signals is None:
        return Applied(None, "tracekit has no check of whether this change was made")
    notes: list[str] = []
    states: list[bool | None] = []
    for s in signals:
        checked = [(r, r.measure(before), r.measure(after)) for r in (s, *s.requires)]
        fired = [r.fired(b, a) for r, b, a in checked]
        if all(fired):
            return Applied(True, "; ".join(r.words(b, a) for r, b, a in checked))
        notes.append("; ".join(r.words(b, a) + ("" if f else f" (expected {r.expected()})")
                               for (r, b, a), f in zip(checked, fired, strict=True)))
        states.append(False if False in fired else None)
    words = "; ".join(notes)
    if all(f is None for f in states):
        return Applied(None, words)
    return Applied(False, words)
