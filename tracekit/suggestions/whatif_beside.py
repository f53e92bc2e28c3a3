"""What-if transforms written beside their rules (enable_gqa, merge_launches, last_logits, freeze_params, int4_large_batch, weight_decay, single_backward, use_conv2d, autotune_once, distance_gemm, filled_cache, read_once, drop_checks, calibration_off, remove_weight_norm, ring_buffer_cache, split_pair_linear, inference_mode, define_kernel_once, attention_plans, grads_to_none, fuse_triton_passes, soa_layout, sparse_grads, sparse_format, flatten_bmm, static_graph_inputs), keyed by rule id."""

from __future__ import annotations

from tracekit.suggestions.rules_attention import enable_gqa_transform, filled_cache_transform
from tracekit.suggestions.rules_cache import ring_buffer_transform
from tracekit.suggestions.rules_compile import static_graph_inputs_transform
from tracekit.suggestions.rules_conv import distance_gemm_transform, use_conv2d_transform
from tracekit.suggestions.rules_expand import flatten_bmm_transform
from tracekit.suggestions.rules_fields import soa_layout_transform
from tracekit.suggestions.rules_grid import merge_launches_transform
from tracekit.suggestions.rules_host import (
    drop_checks_transform,
    read_once_transform,
)
from tracekit.suggestions.rules_int4 import int4_transform
from tracekit.suggestions.rules_leftover import calibration_transform, weight_norm_transform
from tracekit.suggestions.rules_llm import last_logits_transform
from tracekit.suggestions.rules_optimizer import (
    freeze_transform,
    grads_to_none_transform,
    weight_decay_transform,
)
from tracekit.suggestions.rules_pairs import split_pair_transform
from tracekit.suggestions.rules_rebuild import (
    attention_plans_transform,
    define_kernel_once_transform,
    inference_mode_transform,
)
from tracekit.suggestions.rules_recompute import single_backward_transform
from tracekit.suggestions.rules_sparse import sparse_format_transform
from tracekit.suggestions.rules_tables import sparse_grads_transform
from tracekit.suggestions.rules_triton import autotune_transform, fuse_triton_passes_transform
from tracekit.suggestions.whatif_evidence import TransformFor

BESIDE_TRANSFORMS: dict[str, TransformFor] = {
    "enable_gqa": enable_gqa_transform,  # the K/V expansion copies gone, decode attention × 1/g
    "merge_launches": merge_launches_transform,  # each under-filled run as one launch over all its blocks
    "last_logits": last_logits_transform,  # the whole-logits kernels × 1/S
    "freeze_params": freeze_transform,  # backward past the last trained gradient gone
    "int4_large_batch": int4_transform,  # the large-M int4 GEMMs at the bf16 cuBLAS reference time
    "weight_decay": weight_decay_transform,
    "grads_to_none": grads_to_none_transform,  # the zeroing and the accumulations into the zeros gone  # the loss's L2 penalty gone, forward and backward
    "single_backward": single_backward_transform,  # the repeated backward passes' kernels once
    "autotune_once": autotune_transform,
    "fuse_triton_passes": fuse_triton_passes_transform,  # the runs' shorter passes gone with their launches  # the tuning windows' calls and what they launched gone
    "distance_gemm": distance_gemm_transform,  # the broadcast-difference chains at one GEMM's time
    "use_conv2d": use_conv2d_transform,
    "soa_layout": soa_layout_transform,  # the column reads at a contiguous read's share of their time
    "sparse_grads": sparse_grads_transform,  # the table sweeps at the looked-up rows' share of their table part
    "static_graph_inputs": static_graph_inputs_transform,  # the graph-input copies' calls gone with their copies
    "flatten_bmm": flatten_bmm_transform,  # casts, copies and sums over the batch gone, each GEMM at its flattened roof
    "sparse_format": sparse_format_transform,  # coalesce and layout calls gone, each SpMM at its CSR or dense roof
    "drop_checks": drop_checks_transform,  # the checks' calls gone with the host gaps before them
    "calibration_off": calibration_transform,  # the calibrators' calls gone with the host gaps before them
    "remove_weight_norm": weight_norm_transform,  # the weight recomputations' calls gone
    "ring_buffer_cache": ring_buffer_transform,  # the whole-cache rewrites' calls and kernels gone
    "split_pair_linear": split_pair_transform,  # the pair concat's work at the split's added share
    "inference_mode": inference_mode_transform,  # the calls' host gaps less the graph nodes' recording
    "define_kernel_once": define_kernel_once_transform,  # the launches' host gaps less the kernel rebuild
    "attention_plans": attention_plans_transform,  # the builds' host gaps less the plan
    "read_once": read_once_transform,  # each read loop's calls after its first item gone
    "filled_cache": filled_cache_transform,  # the whole-cache attention kernels at the filled share  # the im2col/col2im kernels and the columns' copies gone
}
