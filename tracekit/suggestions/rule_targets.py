"""The diff targets of the rules whose target is one column of their pattern table summed per step: one row each (the part of the step in words, the Patterns table, its step column, its time column)."""

from __future__ import annotations

from tracekit.analyzers import step_parts
from tracekit.analyzers.detectors import (
    attention_plans,
    calibration,
    expanded_bmm,
    grad_recording,
    graph_inputs,
    host_reductions,
    pair_concat,
    sparse_products,
    strided_reads,
    table_grads,
    triton_passes,
    triton_rebuild,
    weight_norm,
    window_shift,
    zeroed_grads,
)
from tracekit.analyzers.step_parts import StepPart

COLUMN_TARGETS: dict[str, StepPart] = {
    "calibration_off": StepPart("host time of the calibrators left on",
        step_parts.column_time("calibration", calibration.CB_STEP, calibration.CB_HOST_US)),
    "remove_weight_norm": StepPart("host time of the weight-normalisation recomputations",
        step_parts.column_time("weight_norm", weight_norm.WN_STEP, weight_norm.WN_HOST_US)),
    "ring_buffer_cache": StepPart("kernels of the whole-cache rewrites",
        step_parts.column_time("window_shift", window_shift.WS_STEP, window_shift.WS_GPU_US)),
    "split_pair_linear": StepPart("kernels of the pair concatenations and their Linear",
        step_parts.column_time("pair_concat", pair_concat.PC_STEP, pair_concat.PC_GONE_US)),
    "inference_mode": StepPart("host time of the autograd graphs recorded in inference steps",
        step_parts.column_time("grad_recording", grad_recording.GR_STEP, grad_recording.GR_HOST_US)),
    "define_kernel_once": StepPart("host time of the Triton kernel objects made per launch",
        step_parts.column_time("triton_rebuild", triton_rebuild.TR_STEP, triton_rebuild.TR_HOST_US)),
    "attention_plans": StepPart("host time of the cuDNN attention plans built per new shape",
        step_parts.column_time("attention_plans", attention_plans.AP_STEP, attention_plans.AP_HOST_US)),
    "fuse_triton_passes": StepPart("kernel time of the Triton passes over one tensor, less the fused kernel's",
        step_parts.column_time("triton_passes", triton_passes.TP_STEP, triton_passes.TP_SAVING_US)),
    "soa_layout": StepPart("kernel time of the element-wise kernels reading an array of structures' fields column by column",
        step_parts.column_time("strided_reads", strided_reads.SR_STEP, strided_reads.SR_US)),
    "reduce_on_gpu": StepPart("time of the large device-to-host copies reduced on the host",
        step_parts.column_time("host_reductions", host_reductions.HR_STEP, host_reductions.HR_COPY_US)),
    "static_graph_inputs": StepPart("GPU time of the inputs copied into CUDA graphs before each replay",
        step_parts.column_time("graph_inputs", graph_inputs.GI_STEP, graph_inputs.GI_US)),
    "flatten_bmm": StepPart("kernel time of the calls on a batch-expanded weight (casts, per-item GEMMs, sums over the batch)",
        step_parts.column_time("expanded_bmm", expanded_bmm.EB_STEP, expanded_bmm.EB_US)),
    "sparse_format": StepPart("kernel time of the sparse products (SpMM, the COO operand's coalesce and layout work)",
        step_parts.column_time("sparse_products", sparse_products.SP_STEP, sparse_products.SP_WORK_US)),
    "sparse_grads": StepPart("kernel time of the whole-table sweeps of embedding tables with dense gradients",
        step_parts.column_time("table_grads", table_grads.TG_STEP, table_grads.TG_US)),
    "grads_to_none": StepPart("kernels of the gradients' zeroing and of the accumulations into the zeros",
        step_parts.column_time("zeroed_grads", zeroed_grads.ZG_STEP, zeroed_grads.ZG_GPU_US)),
}
