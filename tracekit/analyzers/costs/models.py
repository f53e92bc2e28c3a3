"""Per-op FLOPs/bytes: the registry of op models (MODELS) and `op_cost`, a pure function of the args.

Each model reads an op call's `Input Dims`, `Input type`, `Input Strides` and `Concrete Inputs`
and returns an OpCost (None when the op has no model or its arguments are not enough). Triton
kernels (Inductor's and the user's, recorded by `tracekit profile`) are costed from the tensor
arguments of their launch op."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from tracekit.analyzers.costs import models_matmul as mm
from tracekit.analyzers.costs.models_nn import NN_MODELS, NORM_FLOPS
from tracekit.analyzers.costs.models_pointwise import (
    ARITHMETIC,
    COMPARISON,
    POINTWISE_MODELS,
    elementwise,
    foreach,
)
from tracekit.analyzers.costs.models_serving import SERVING_MODELS
from tracekit.analyzers.costs.op_args import (
    SPLIT,
    Model,
    OpArgs,
    OpCost,
    Tensor,
    user_gemm_flops,
    widest_float,
)
from tracekit.trace.tables import ARG_NAMES_KEY, KERNEL_BACKEND_KEY, TRITON_BACKEND, USER_TRITON_KEY

ATEN_PREFIX = "aten::"
TRITON_PREFIX = "triton_"
TRITON_TEMPLATE_PREFIX = "triton_tem_"  # Inductor's GEMM templates
# aiter.ops.triton SageAttention forward, sage_fwd(q, k, v, ...) with q/k int8 [B, H, L, D] and v fp8
# (TraceLens xDiT Flux.1 MI300X capture trace: sage_fwd_1 under the HIP graph replay)
SAGE_PREFIX = "sage_fwd"
SAGE_QUANT_PREFIX = "sage_quant"  # its quantization of q/k (int8) and v (fp8), sage_quant_kernel(q, q_int8, q_scale, ...)
SAGE_QUANT_FLOPS = 3.0
# Inductor's fused layer/RMS norm reductions (the class rules' normalization rows for triton_red/per_)
INDUCTOR_NORM = re.compile(r"^triton_(red|per)_\w*(layer_norm|rms_norm|native_norm|group_norm)|"
                           r"^triton_(red|per)_(?=\w*mean)\w*rsqrt")


# The registry: op name (without `aten::`) -> its model. `model_for` adds the name families
# (`_foreach_*`, in-place `op_` of an arithmetic op) that a table cannot list.
MODELS: dict[str, Model] = {
    **mm.MATMUL_MODELS,
    **POINTWISE_MODELS,
    **NN_MODELS,
    **SERVING_MODELS,  # serving-stack custom ops, by their namespaced names (vllm, sgl_kernel, aiter)
}


def model_for(name: str) -> tuple[str, Model] | None:
    """The model of an op name (with or without `aten::`): (name the model sees, model) or None."""
    base = name.removeprefix(ATEN_PREFIX)
    fn = MODELS.get(base)
    if fn is not None:
        return base, fn
    if base.startswith("_foreach_"):
        return base, foreach
    stripped = base.rstrip("_")
    if stripped in ARITHMETIC or stripped in COMPARISON:
        return base, elementwise
    return None


def op_cost(name: str, dims: Sequence[object] | None, types: Sequence[str] | None, strides: Sequence[object] | None = None,
            concrete: Sequence[object] | None = None, extra: dict | None = None) -> OpCost | None:
    """FLOPs/bytes of one op call from its recorded arguments, or None when unknown.

    >>> op_cost("aten::mm", [[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2).flops
    137438953472.0"""
    if not dims:
        return None
    args = OpArgs.of(dims, types, strides, concrete)
    if args.reads_sparse():
        return None  # a dense model would price every entry of a sparse operand (heldout25 copurchase_gcn)
    if extra and (extra.get(KERNEL_BACKEND_KEY) == TRITON_BACKEND or extra.get(USER_TRITON_KEY)):
        return triton_cost(name, args, extra)
    if name.startswith(TRITON_PREFIX):
        return triton_cost(name, args, extra or {})
    found = model_for(name)
    if found is None:
        return None
    base, fn = found
    try:
        return fn(base, args)
    except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError):
        return None  # arguments that do not match the op's signature: unknown, not a crash


def parent_cost(name: str, parent: str, dims: Sequence[object] | None, types: Sequence[str] | None,
                strides: Sequence[object] | None = None, concrete: Sequence[object] | None = None) -> OpCost | None:
    """Cost of op `name` from its parent op's recorded args, for the ops in PARENT_MODELS (None for
    any other op, or when `parent` is not the expected parent)."""
    entry = mm.PARENT_MODELS.get(name.removeprefix(ATEN_PREFIX))
    if entry is None or parent.removeprefix(ATEN_PREFIX) != entry[0] or not dims:
        return None
    try:
        return mm.conv_backward_part(entry[1], OpArgs.of(dims, types, strides, concrete))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def triton_cost(name: str, a: OpArgs, extra: dict) -> OpCost | None:
    """A Triton kernel's launch op: bytes = every tensor argument once (Inductor passes inputs
    and outputs; in-place buffers count once). FLOPs only where a matmul is certain: Inductor
    GEMM templates (`triton_tem_*`) and user kernels whose M, N, K arguments match the shapes."""
    ts = a.tensors()
    if not ts:
        return None
    total = float(sum(t.read_bytes for t in ts))
    flops: float | None = None
    if name.startswith(TRITON_TEMPLATE_PREFIX):
        flops = _template_gemm_flops(ts)
    elif name.startswith(SAGE_PREFIX):
        flops = _attention_flops(ts)
    elif INDUCTOR_NORM.search(name):  # as the aten norm models count: per element of the normalised input
        flops = NORM_FLOPS * max(t.numel for t in ts)
    elif name.startswith(SAGE_QUANT_PREFIX):  # per 16-bit input element: |x| max, scale, convert
        flops = SAGE_QUANT_FLOPS * sum(t.numel for t in ts if t.dtype in ("bf16", "fp16"))
    elif extra.get(USER_TRITON_KEY):
        flops = user_gemm_flops(a, extra.get(ARG_NAMES_KEY))
    return OpCost(flops, total, widest_float([t.dtype for t in ts]), None, SPLIT)


def _template_gemm_flops(ts: list[Tensor]) -> float | None:
    """2*B*M*N*K from the first A[..., M, K], B[..., K, N] pair that has an output [..., M, N]."""
    mats = [t for t in ts if len(t.dims) in (2, 3)]
    for i, x in enumerate(mats):
        for w in mats[i + 1:]:
            if len(x.dims) != len(w.dims) or x.dims[:-2] != w.dims[:-2] or x.dims[-1] != w.dims[-2]:
                continue
            out = (*x.dims[:-2], x.dims[-2], w.dims[-1])
            if any(t.dims == out for t in ts if t is not x and t is not w):
                return 2.0 * math.prod(x.dims[:-1]) * w.dims[-1] * x.dims[-1]
    return None


def _attention_flops(ts: list[Tensor]) -> float | None:
    """2*B*H*Lq*Lk*(D + Dv) from the first three tensors, q/k/v [B, H, L, D] (non-causal: the
    diffusion models that run Sage attention attend every pair)."""
    if len(ts) < 3 or any(len(t.dims) != 4 for t in ts[:3]):
        return None
    q, k, v = ts[:3]
    b, h, lq, d = q.dims
    if k.dims[0] != b or k.dims[3] != d or v.dims[2] != k.dims[2]:
        return None
    return 2.0 * b * h * lq * k.dims[2] * (d + v.dims[3])
