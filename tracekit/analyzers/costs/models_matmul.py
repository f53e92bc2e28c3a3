"""FLOPs/bytes models of matrix ops: GEMM family, scaled-dot-product attention, convolution.

Conventions (see docs/validation.md): a multiply-add is 2 FLOPs; bias adds and the alpha/beta
scaling of addmm/baddbmm are not counted (M*N next to 2*M*N*K); bytes are the compulsory traffic:
every input read once, every output written once. A 4096^3 GEMM is 2*4096^3 = 137.4 GFLOP."""

from __future__ import annotations

import math

from tracekit.analyzers.costs.op_args import (
    DTYPE_SIZE,
    LONGEST,
    SCALAR_TYPE_CODES,
    SPLIT,
    Model,
    OpArgs,
    OpCost,
    Tensor,
    broadcast,
)
from tracekit.analyzers.kernels import ATTENTION, CONV, GEMM

GEMM_WORK = (GEMM,)  # the kernel classes that do an op call's work
ATTENTION_WORK = (ATTENTION, GEMM)
CONV_WORK = (CONV, GEMM)

# Backward attention does 5 matmuls (recomputed S, dV, dP, dQ, dK) against the forward's 2.
ATTENTION_BWD_FACTOR = 2.5


def _gemm(flops: float, reads: list[Tensor | None], out_elems: float, out_dtype: str,
          dtype: str | None = None) -> OpCost:
    read = sum(t.read_bytes for t in reads if t is not None)
    written = out_elems * DTYPE_SIZE.get(out_dtype, 0)
    return OpCost(flops, read + written, dtype or out_dtype, GEMM_WORK, LONGEST)


def mm(name: str, a: OpArgs) -> OpCost | None:
    """mm(A[M,K], B[K,N]) and _int_mm: 2*M*N*K."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x.dims) != 2 or len(w.dims) != 2:
        return None
    (m, k), n = x.dims, w.dims[1]
    return _gemm(2.0 * m * n * k, [x, w], m * n, x.dtype)


def addmm(name: str, a: OpArgs) -> OpCost | None:
    """addmm(bias, A[M,K], B[K,N], beta, alpha) and _addmm_activation: 2*M*N*K (bias not counted)."""
    bias, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is None or w is None or len(x.dims) != 2 or len(w.dims) != 2:
        return None
    (m, k), n = x.dims, w.dims[1]
    return _gemm(2.0 * m * n * k, [bias, x, w], m * n, x.dtype)


def bmm(name: str, a: OpArgs) -> OpCost | None:
    """bmm(A[B,M,K], B[B,K,N]): 2*B*M*N*K."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x.dims) != 3 or len(w.dims) != 3:
        return None
    b, m, k = x.dims
    n = w.dims[2]
    return _gemm(2.0 * b * m * n * k, [x, w], b * m * n, x.dtype)


def baddbmm(name: str, a: OpArgs) -> OpCost | None:
    """baddbmm(C, A[B,M,K], B[B,K,N], beta, alpha): 2*B*M*N*K; addbmm sums over B (output M*N);
    C is read unless beta is 0."""
    c, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is None or w is None or len(x.dims) != 3 or len(w.dims) != 3:
        return None
    b, m, k = x.dims
    n = w.dims[2]
    out = m * n if c is not None and len(c.dims) == 2 else b * m * n
    if a.value(3) == 0:  # beta = 0: C is not read (HF attention's baddbmm(empty, q, k, beta=0))
        c = None
    return _gemm(2.0 * b * m * n * k, [c, x, w], out, x.dtype)


def matmul(name: str, a: OpArgs) -> OpCost | None:
    """matmul with numpy broadcasting of batch dims (1-D operands promoted as torch does)."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or not x.dims or not w.dims:
        return None
    xd = x.dims if len(x.dims) > 1 else (1, *x.dims)
    wd = w.dims if len(w.dims) > 1 else (*w.dims, 1)
    if xd[-1] != wd[-2]:
        return None
    batch = broadcast([xd[:-2], wd[:-2]])
    if batch is None:
        return None
    m, k, n = xd[-2], xd[-1], wd[-1]
    nb = math.prod(batch)
    return _gemm(2.0 * nb * m * n * k, [x, w], nb * m * n, x.dtype)


def linear(name: str, a: OpArgs) -> OpCost | None:
    """linear(x[..., K], W[N, K], bias[N]): 2*M*N*K with M = rows of x."""
    x, w, bias = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is None or w is None or not x.dims or len(w.dims) != 2 or x.dims[-1] != w.dims[1]:
        return None
    m = math.prod(x.dims[:-1])
    n, k = w.dims
    return _gemm(2.0 * m * n * k, [x, w, bias], m * n, x.dtype)


def mv(name: str, a: OpArgs) -> OpCost | None:
    """mv(A[M,N], x[N]) / addmv(b, A, x): 2*M*N."""
    offset = 1 if a.tensor(0) is not None and a.tensor(2) is not None else 0
    mat, vec = a.tensor(offset), a.tensor(offset + 1)
    if mat is None or vec is None or len(mat.dims) != 2:
        return None
    m, n = mat.dims
    extra = [a.tensor(0)] if offset else []
    return _gemm(2.0 * m * n, [mat, vec, *extra], m, mat.dtype)


def dot(name: str, a: OpArgs) -> OpCost | None:
    """dot / vdot of two length-N vectors: 2*N."""
    x, y = a.tensor(0), a.tensor(1)
    if x is None or y is None:
        return None
    return _gemm(2.0 * x.numel, [x, y], 1, x.dtype)


def scaled_mm(name: str, a: OpArgs) -> OpCost | None:
    """_scaled_mm(A[M,K], B[K,N], scale_a, scale_b, bias, scale_result, out_dtype, fast_accum)."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x.dims) != 2 or len(w.dims) != 2:
        return None
    (m, k), n = x.dims, w.dims[1]
    if x.dtype == "fp4":  # Float4_e2m1fn_x2: two fp4 values per recorded element along K
        k *= 2
    code = a.value(6)
    out_dtype = SCALAR_TYPE_CODES.get(code, x.dtype) if isinstance(code, int) else x.dtype
    extras = [a.tensor(i) for i in (2, 3, 4)]
    return _gemm(2.0 * m * n * k, [x, w, *extras], m * n, out_dtype, dtype=x.dtype)


def grouped_mm(name: str, a: OpArgs) -> OpCost | None:
    """_grouped_mm / _scaled_grouped_mm with A[total_M, K] and B[G, K, N]: 2*total_M*K*N."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x.dims) != 2 or len(w.dims) != 3 or x.dims[1] != w.dims[1]:
        return None
    (m, k), n = x.dims, w.dims[2]
    return _gemm(2.0 * m * n * k, [x, w], m * n, x.dtype)


def weight_int4pack_mm(name: str, a: OpArgs) -> OpCost | None:
    """_weight_int4pack_mm(x[M,K], w_packed, group_size, scales_and_zeros[K/group, N, 2]) (tinygemm,
    torchao's int4 weight-only GEMM) and _weight_int4pack_mm_for_cpu: 2*M*N*K, N from the scales.
    The packed weight is int32 [N/8, K/(16*tiles), 32, tiles/2] on CUDA (uint8 [N, K/2] on CPU): N*K/2
    bytes either way. Bytes: x, the int4 weights, the bf16 scales and zeros, the output [M, N].
    dtype: x's (bf16): the kernel dequantises to bf16 and runs bf16 MMAs."""
    x, w, sz = a.tensor(0), a.tensor(1), a.tensor(3)
    if x is None or w is None or sz is None or len(x.dims) != 2 or len(sz.dims) != 3:
        return None
    (m, k), n = x.dims, sz.dims[1]
    group = a.value(2)
    if isinstance(group, int) and not isinstance(group, bool) and group > 0 and sz.dims[0] * group != k:
        return None  # the scales do not cover K in groups: not the signature this model reads
    weights = n * k / 2
    return OpCost(2.0 * m * n * k, x.read_bytes + weights + sz.read_bytes + m * n * x.itemsize, x.dtype,
                  GEMM_WORK, LONGEST)


# --- attention ----------------------------------------------------------------------------------
# op -> (layout of q/k/v: "bhld" or "blhd", index of query, index of the causal flag,
#         kind of flag: "bool" or "mask" (custom_mask_type: 0 none, 1/2 causal), backward?)
ATTENTION_OPS: dict[str, tuple[str, int, int, str, bool]] = {
    "scaled_dot_product_attention": ("bhld", 0, 5, "bool", False),
    "_scaled_dot_product_flash_attention": ("bhld", 0, 4, "bool", False),
    "_scaled_dot_product_efficient_attention": ("bhld", 0, 6, "bool", False),
    "_scaled_dot_product_cudnn_attention": ("bhld", 0, 6, "bool", False),
    "_cudnn_attention_forward": ("bhld", 0, 10, "bool", False),
    "_flash_attention_forward": ("blhd", 0, 8, "bool", False),
    "_efficient_attention_forward": ("blhd", 0, 9, "mask", False),
    "_scaled_dot_product_flash_attention_backward": ("bhld", 1, 11, "bool", True),
    "_scaled_dot_product_efficient_attention_backward": ("bhld", 1, 11, "bool", True),
    "_scaled_dot_product_cudnn_attention_backward": ("bhld", 1, 14, "bool", True),
    "_cudnn_attention_backward": ("bhld", 1, 14, "bool", True),
    "_flash_attention_backward": ("blhd", 1, 11, "bool", True),
    "_efficient_attention_backward": ("blhd", 1, 14, "mask", True),
}


def attention(name: str, a: OpArgs) -> OpCost | None:
    """SDPA: 2*B*Hq*Lq*Lk*(E+Ev) forward, halved when causal; backward 2.5x forward.

    Bytes: q, k, v (with their own head counts, so GQA reads the smaller K/V) and the output;
    backward also reads the output gradient and the output and writes dq, dk, dv."""
    layout, qi, ci, kind, backward = ATTENTION_OPS[name]
    q, k, v = a.tensor(qi), a.tensor(qi + 1), a.tensor(qi + 2)
    if q is None or k is None or v is None or len(q.dims) != 4 or len(k.dims) != 4:
        return None
    if layout == "bhld":
        b, hq, lq, e = q.dims
        lk, ev = k.dims[2], v.dims[-1]
    else:
        b, lq, hq, e = q.dims
        lk, ev = k.dims[1], v.dims[-1]
    flag = a.value(ci)
    causal = bool(flag) if kind == "bool" else (isinstance(flag, int) and flag > 0)
    flops = 2.0 * b * hq * lq * lk * (e + ev)
    if causal:
        flops /= 2
    out_bytes = b * hq * lq * ev * q.itemsize
    qkv = q.read_bytes + k.read_bytes + v.read_bytes
    if backward:
        flops *= ATTENTION_BWD_FACTOR
        total = 2 * qkv + 2 * out_bytes  # read dO, O, q, k, v; write dq, dk, dv
    else:
        mask = a.tensor(3)
        total = qkv + out_bytes + (mask.read_bytes if mask is not None else 0)
    return OpCost(flops, total, q.dtype, ATTENTION_WORK, LONGEST)


# --- convolution --------------------------------------------------------------------------------
# op -> positions of (input, weight, bias, stride, padding, dilation, transposed flag,
# output_padding, groups); -1 = not an argument of that op, -2 as transposed = always transposed
CONV_OPS: dict[str, tuple[int, int, int, int, int, int, int, int, int]] = {
    "convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "conv1d": (0, 1, 2, 3, 4, 5, -1, -1, 6),
    "conv2d": (0, 1, 2, 3, 4, 5, -1, -1, 6),
    "conv3d": (0, 1, 2, 3, 4, 5, -1, -1, 6),
    "cudnn_convolution": (0, 1, -1, 3, 2, 4, -1, -1, 5),
    "cudnn_convolution_relu": (0, 1, 2, 3, 4, 5, -1, -1, 6),
    "cudnn_convolution_transpose": (0, 1, -1, 4, 2, 5, -2, 3, 6),
    "miopen_convolution": (0, 1, 2, 4, 3, 5, -1, -1, 6),
    "miopen_depthwise_convolution": (0, 1, 2, 4, 3, 5, -1, -1, 6),
    "miopen_convolution_transpose": (0, 1, 2, 5, 3, 6, -2, 4, 7),
    "_conv_depthwise2d": (0, 1, 3, 4, 5, 6, -1, -1, -1),
    "slow_conv_dilated2d": (0, 1, 3, 4, 5, 6, -1, -1, -1),
}


def conv(name: str, a: OpArgs) -> OpCost | None:
    """Convolution forward: 2 * N * prod(out spatial) * Cout * (Cin/groups) * prod(kernel).

    Output size from stride/padding/dilation in `Concrete Inputs`; unknown when they are absent.
    Transposed: 2 * N * prod(in spatial) * Cin * (Cout/groups) * prod(kernel)."""
    ii, wi, bi, si, pi, di, ti, oi, gi = CONV_OPS[name]
    x, w = a.tensor(ii), a.tensor(wi)
    if x is None or w is None or len(x.dims) < 3 or len(x.dims) != len(w.dims):
        return None
    nd = len(x.dims) - 2
    transposed = ti == -2 or (ti >= 0 and a.value(ti) is True)
    stride = a.int_list(si, nd)
    padding = a.int_list(pi, nd)
    dilation = a.int_list(di, nd) or (1,) * nd
    if stride is None or padding is None:
        return None
    ksize = w.dims[2:]
    n, spatial = x.dims[0], x.dims[2:]
    if transposed:
        out_pad = a.int_list(oi, nd) or (0,) * nd
        groups = a.value(gi) if gi >= 0 else None
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            return None
        cout = w.dims[1] * groups
        out = tuple((s - 1) * st - 2 * p + d * (k - 1) + op + 1
                    for s, st, p, d, k, op in zip(spatial, stride, padding, dilation, ksize, out_pad, strict=True))
        flops = 2.0 * n * math.prod(spatial) * x.dims[1] * w.dims[1] * math.prod(ksize)
    else:
        cout = w.dims[0]
        out = tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                    for s, st, p, d, k in zip(spatial, stride, padding, dilation, ksize, strict=True))
        flops = 2.0 * n * math.prod(out) * cout * w.dims[1] * math.prod(ksize)
    if any(o <= 0 for o in out):
        return None
    bias = a.tensor(bi) if bi >= 0 else None
    written = n * cout * math.prod(out) * x.itemsize
    read = x.read_bytes + w.read_bytes + (bias.read_bytes if bias is not None else 0)
    return OpCost(flops, read + written, x.dtype, CONV_WORK, SPLIT)


def conv_backward(name: str, a: OpArgs) -> OpCost | None:
    """convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask): each of grad-input and grad-weight costs
    one forward's FLOPs, computed from the recorded grad_out shape (no stride/padding needed)."""
    go, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
    if go is None or x is None or w is None or len(go.dims) < 3:
        return None
    mask = a.value(10)
    want_in, want_w = (bool(mask[0]), bool(mask[1])) if isinstance(mask, list) and len(mask) >= 2 \
        else (True, True)
    # one pass costs the forward's FLOPs; the forward's output is grad_out (input if transposed)
    spatial = x if a.value(7) is True else go
    per_pass = 2.0 * go.dims[0] * math.prod(spatial.dims[2:]) * math.prod(w.dims)
    flops = per_pass * (want_in + want_w)
    read = go.read_bytes + (w.read_bytes if want_in else 0) + (x.read_bytes if want_w else 0)
    written = (x.nbytes if want_in else 0) + (w.nbytes if want_w else 0)
    return OpCost(flops, read + written, go.dtype, CONV_WORK, SPLIT)


def cudnn_conv_backward(name: str, a: OpArgs) -> OpCost | None:
    """cudnn_convolution_backward(input, grad_out, weight, padding, stride, dilation, groups, ...,
    output_mask) (2021-era op): grad-input and grad-weight, as convolution_backward."""
    reordered = OpArgs(
        dims=(a.dims[1], a.dims[0], a.dims[2]) if len(a.dims) >= 3 else a.dims,
        types=(a.types[1], a.types[0], a.types[2]) if len(a.types) >= 3 else a.types,
        strides=(a.strides[1], a.strides[0], a.strides[2]) if len(a.strides) >= 3 else a.strides,
        concrete=("",) * 10 + tuple(a.concrete[10:11]),
    )
    return conv_backward(name, reordered)


def cudnn_conv_backward_input(name: str, a: OpArgs) -> OpCost | None:
    """cudnn_convolution_backward_input(self_size, grad_out, weight, ...): one forward's FLOPs;
    bytes unknown (the input size is a list the profiler does not record)."""
    go, w = a.tensor(1), a.tensor(2)
    if go is None or w is None or len(go.dims) < 3:
        return None
    flops = 2.0 * go.dims[0] * math.prod(go.dims[2:]) * w.dims[0] * w.dims[1] * math.prod(w.dims[2:])
    return OpCost(flops, None, go.dtype, CONV_WORK, SPLIT)


def conv_backward_part(part: str, a: OpArgs) -> OpCost | None:
    """One half of a 2021-era conv backward, from its parent cudnn/miopen_convolution_backward's
    args (input, grad_out, weight, ...): cudnn_convolution_backward_input ("input": read grad_out
    and weight, write grad_input) or _weight ("weight": read grad_out and input, write grad_weight).
    The children's own args lack the input or weight shape (a list the profiler did not record)."""
    x, go, w = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is None or go is None or w is None or len(go.dims) < 3:
        return None
    flops = 2.0 * go.dims[0] * math.prod(go.dims[2:]) * math.prod(w.dims)
    if part == "input":
        total = go.read_bytes + w.read_bytes + x.nbytes
    else:
        total = go.read_bytes + x.read_bytes + w.nbytes
    return OpCost(flops, total, go.dtype, CONV_WORK, SPLIT)


# child op -> (parent op whose args it is costed from, part)
PARENT_MODELS: dict[str, tuple[str, str]] = {
    "cudnn_convolution_backward_input": ("cudnn_convolution_backward", "input"),
    "cudnn_convolution_backward_weight": ("cudnn_convolution_backward", "weight"),
    "miopen_convolution_backward_input": ("miopen_convolution_backward", "input"),
    "miopen_convolution_backward_weight": ("miopen_convolution_backward", "weight"),
}


MATMUL_MODELS: dict[str, Model] = {
    "mm": mm,
    "_int_mm": mm,
    "addmm": addmm,
    "_addmm_activation": addmm,
    "bmm": bmm,
    "baddbmm": baddbmm,
    "addbmm": baddbmm,
    "matmul": matmul,
    "linear": linear,
    "mv": mv,
    "addmv": mv,
    "addmv_": mv,  # mv's out-of-place path writes through it (torch 2.11: aten::mv → aten::addmv_)
    "dot": dot,
    "vdot": dot,
    "_scaled_mm": scaled_mm,
    "_grouped_mm": grouped_mm,
    "_scaled_grouped_mm": grouped_mm,
    "_weight_int4pack_mm": weight_int4pack_mm,
    "_weight_int4pack_mm_for_cpu": weight_int4pack_mm,
    "convolution_backward": conv_backward,
    "cudnn_convolution_backward": cudnn_conv_backward,
    "cudnn_convolution_backward_input": cudnn_conv_backward_input,
    **dict.fromkeys(ATTENTION_OPS, attention),
    **dict.fromkeys(CONV_OPS, conv),
}
