"""Patterns the suggestion rules read: kernel sequences (sequences.py), host-side stalls (hostside.py), optimizer steps (optimizer.py) and those run on the host (offload.py), per-tensor loops (foreach.py), batch-1 request loops (requests.py), gradient accumulation over repeated micro-batches (accumulation.py), per-sample loops (samples.py), masked attention and the masks built for it (attention_mask.py, mask_build.py), SDPA fallbacks (sdpa_fallback.py), layer chains and layout transposes (layers.py), torch.compile graph breaks (compiled.py) and recompiles inside the steps (recompiles.py), user Triton launches (triton_launch.py), GEMM leading dimensions (gemm_layout.py), RNN cell loops (recurrent.py), embedding lookups per table (embeddings.py), caches grown by torch.cat (cache_growth.py), static weights converted before every GEMM call (weight_convert.py), forwards re-run in backward by activation checkpointing (recompute.py) and their entries in the forward (checkpoint_entry.py), generation re-running the model over the whole sequence per token (generation.py), model ensembles and attention heads called member by member (ensembles.py, heads.py), autograd anomaly checks (anomaly.py), end-of-step cleanup (cleanup.py), synchronous kernel launches (launch_blocking.py), multi-process DataLoader iterators created per step (loader_respawn.py), kernels launched piece by piece with grids far smaller than the GPU (underfilled.py), grouped-query K/V expanded for SDPA (gqa_expand.py), prefill logits of every position read at the last (full_logits.py), gradients no optimizer reads (frozen_grads.py), L2 penalties over every parameter in the loss (l2_penalty.py), backward run once per loss (backward_passes.py), convolutions written as im2col + matmul (unfold_conv.py), a fixed context projected again for every generated token (context_projection.py), Triton's autotuner benchmarking inside the steps (autotune.py), pairwise distances by broadcasting (broadcast_distance.py), decoding attention over a whole static K/V cache (static_cache.py), finished results read back one item at a time (item_reads.py), value checks read on the host in the loop (value_checks.py), quantizers still calibrating at inference (calibration.py), weight normalisation recomputed at inference (weight_norm.py), decoding caches rewritten whole at every token (window_shift.py), Linears over concatenated pairs (pair_concat.py), user Triton kernels made anew at each call (triton_rebuild.py), cuDNN attention plans built per new shape (attention_plans.py), autograd graphs recorded in inference steps (grad_recording.py), user Triton kernels passing over one tensor one after another (triton_passes.py) gradients zeroed instead of freed (zeroed_grads.py), fields of an array of structures read column by column (strided_reads.py), embedding tables trained with dense gradients (table_grads.py), sparse products that coalesce their operand at every call or would run faster dense (sparse_products.py), weights expanded to a batch for bmm (expanded_bmm.py), inputs copied into CUDA graphs at every replay (graph_inputs.py) and large tensors copied to the host to be reduced there (host_reductions.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.detectors import (
    accumulation,
    attention_mask,
    attention_plans,
    autotune,
    backward_passes,
    broadcast_distance,
    cache_growth,
    calibration,
    context_projection,
    embeddings,
    ensembles,
    expanded_bmm,
    foreach,
    frozen_grads,
    full_logits,
    gemm_layout,
    generation,
    gqa_expand,
    grad_recording,
    graph_inputs,
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
from tracekit.analyzers.detectors import anomaly as anomaly_mode
from tracekit.analyzers.detectors import cleanup as step_cleanup
from tracekit.analyzers.detectors import compiled as dynamo
from tracekit.analyzers.detectors import launch_blocking as sync_launch
from tracekit.analyzers.detectors import recompiles as dynamo_compiles
from tracekit.jsonsafe import records

if TYPE_CHECKING:
    pass


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
    # per rank.runtime row: inside a compiled graph's call (compiled.in_compiled_graphs)
    in_compiled_graph: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
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
    # per rank.runtime row: a call of an op that copied GPU results back in bulk (item_reads.find_copy_back_calls)
    copy_back_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
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
    # unfold_conv.UNFOLD_COLUMNS per step with im2col / col2im calls; per rank.gpu row, im2col work
    # (the im2col/col2im kernels, the columns' casts and copies) a native convolution does not do
    unfold_conv: pd.DataFrame = field(default_factory=unfold_conv.empty)
    in_unfold_conv: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # context_projection.CONTEXT_COLUMNS per step × thread; per rank.runtime row, a call of a fixed context's
    # projection in a decoding forward after the first
    context_projection: pd.DataFrame = field(default_factory=context_projection.empty)
    context_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # autotune.AUTOTUNE_COLUMNS per step × thread; per rank.runtime row, a call of a tuning window
    autotune: pd.DataFrame = field(default_factory=autotune.empty)
    autotune_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # broadcast_distance.BROADCAST_COLUMNS per step × shapes; per rank.gpu row, a broadcast-difference chain's kernel
    broadcast_distance: pd.DataFrame = field(default_factory=broadcast_distance.empty)
    in_broadcast_distance: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # static_cache.STATIC_COLUMNS per step × call shapes; per rank.gpu row, the time share an attention
    # kernel of such a call keeps (1.0 elsewhere), and a kernel of its mask; per rank.runtime row, a
    # call launching one of the latter
    static_cache: pd.DataFrame = field(default_factory=static_cache.empty)
    static_cache_share: np.ndarray = field(default_factory=lambda: np.ones(0))
    # item_reads.READ_COLUMNS per run of per-item device-to-host reads; per rank.runtime row, a call
    # reading once removes, and the same per row of `syncs`
    item_reads: pd.DataFrame = field(default_factory=item_reads.empty)
    item_read_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    sync_in_reads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # per rank.runtime row: the sync call (runtime row) of the small value read whose host work the
    # call is (sync_reads.py: the read op and the stack that gathers for it), -1 elsewhere
    sync_read_group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # per row of `syncs`: the sync of a read whose value the next ops take back as a Python number
    sync_round_trip: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    static_cache_gone: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    static_cache_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # value_checks.CHECK_COLUMNS per step × thread; per rank.runtime row, a check's call, and the same
    # per row of `syncs`
    value_checks: pd.DataFrame = field(default_factory=value_checks.empty)
    value_check_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    sync_in_checks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # calibration.CALIBRATION_COLUMNS per step × thread; per rank.runtime row, a calibrator's call, and the
    # same per row of `syncs`
    calibration: pd.DataFrame = field(default_factory=calibration.empty)
    calibration_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    sync_in_calibration: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # weight_norm.WEIGHT_NORM_COLUMNS per step × thread; per rank.runtime row, a recomputation's call
    weight_norm: pd.DataFrame = field(default_factory=weight_norm.empty)
    weight_norm_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # window_shift.WINDOW_SHIFT_COLUMNS per step × thread; per rank.runtime row, a whole-cache rewrite's call
    window_shift: pd.DataFrame = field(default_factory=window_shift.empty)
    window_shift_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # pair_concat.PAIR_CONCAT_COLUMNS per step × pair shape; per rank.gpu row, work the weight split removes
    pair_concat: pd.DataFrame = field(default_factory=pair_concat.empty)
    in_pair_concat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # triton_rebuild.TRITON_REBUILD_COLUMNS per step × definition site; per rank.runtime row, host µs it saves
    triton_rebuild: pd.DataFrame = field(default_factory=triton_rebuild.empty)
    triton_rebuild_cut_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # attention_plans.ATTENTION_PLAN_COLUMNS per step × op; per rank.runtime row, host µs no plan build saves
    attention_plans: pd.DataFrame = field(default_factory=attention_plans.empty)
    attention_plan_cut_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # grad_recording.GRAD_RECORDING_COLUMNS per step × thread; per rank.runtime row, host µs inference mode saves
    grad_recording: pd.DataFrame = field(default_factory=grad_recording.empty)
    grad_recording_cut_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # zeroed_grads.ZEROED_COLUMNS per zero_grad range that zeroed gradients; per rank.runtime row, a call of the
    # zeroing or of an in-place accumulation into its zeros
    zeroed_grads: pd.DataFrame = field(default_factory=zeroed_grads.empty)
    zeroed_grad_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # triton_passes.TRITON_PASSES_COLUMNS per step; per rank.runtime row, a launch a fused kernel saves
    triton_passes: pd.DataFrame = field(default_factory=triton_passes.empty)
    triton_pass_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # strided_reads.STRIDED_COLUMNS per step; per rank.gpu row, the column stride its op reads (0: none)
    strided_reads: pd.DataFrame = field(default_factory=strided_reads.empty)
    read_stride: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # table_grads.TABLE_COLUMNS per step; per rank.gpu row, the share of its kernel sweeping a dense-gradient table
    table_grads: pd.DataFrame = field(default_factory=table_grads.empty)
    table_sweep: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # sparse_products.SPARSE_COLUMNS per product call; per rank.gpu row its part and call (-1 none); per
    # rank.runtime row, a call of a product's coalesce or layout work
    sparse_products: pd.DataFrame = field(default_factory=sparse_products.empty)
    sparse_part: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    sparse_call: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sparse_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # expanded_bmm.EXPANDED_COLUMNS per step; per rank.gpu row its part, expanded-shape elements, µs and step
    expanded_bmm: pd.DataFrame = field(default_factory=expanded_bmm.empty)
    expanded_part: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    expanded_touched: np.ndarray = field(default_factory=lambda: np.zeros(0))
    expanded_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    expanded_step: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # graph_inputs.GRAPH_INPUT_COLUMNS per step; per rank.runtime row, a call of a graph-input copy
    graph_inputs: pd.DataFrame = field(default_factory=graph_inputs.empty)
    graph_input_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # host_reductions.HOST_REDUCTION_COLUMNS: large device-to-host copies reduced on the host
    host_reductions: pd.DataFrame = field(default_factory=host_reductions.empty)
    rebuild_spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # both: (start, end) of the host time cut
    compiled_spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (start, end) of the compiled regions, merged

    def to_dict(self) -> dict[str, Any]:
        tables = ("chains", "loops", "attention", "syncs", "copies", "dataloader", "comm")
        return {"rank": self.rank, "num_sms": self.num_sms,
                **{name: records(getattr(self, name), {sequences.LP_SHAPES: format_shapes})
                   for name in tables}}
