"""FLOPs/bytes models of elementwise, copy/cast, reduction and foreach ops (names without `aten::`).

Bytes are compulsory traffic: each input read once (broadcast dimensions, stride 0, once), each
output written once; in-place ops (`add_`) read and write their first argument. FLOPs: 1 per
output element for arithmetic, 0 for copies, casts and fills, 1 per input element for reductions."""

from __future__ import annotations

import math

from tracekit.analyzers.costs.op_args import (
    DTYPE_SIZE,
    SCALAR_TYPE_CODES,
    Model,
    OpArgs,
    OpCost,
    broadcast,
    result_dtype,
)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Arithmetic elementwise ops (and their in-place `op_` forms): output = broadcast of the inputs.
ARITHMETIC = _names("""
abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh
asinh acosh atanh sigmoid relu relu6 gelu silu mish hardswish hardsigmoid hardtanh leaky_relu elu
selu celu softplus softshrink hardshrink erf erfc erfinv reciprocal sign sgn floor ceil round trunc
frac clamp clamp_min clamp_max clip threshold square pow float_power bitwise_not nan_to_num
sigmoid_backward tanh_backward gelu_backward silu_backward threshold_backward hardswish_backward
hardsigmoid_backward leaky_relu_backward elu_backward softplus_backward mish_backward
hardtanh_backward add sub rsub mul div true_divide floor_divide remainder fmod maximum minimum fmax
fmin atan2 hypot copysign lerp addcmul addcdiv where masked_fill bitwise_and bitwise_or bitwise_xor
bitwise_left_shift bitwise_right_shift xlogy native_dropout_backward tril triu _masked_scale
cumsum cumprod logcumsumexp flip roll heaviside logit polar complex angle conj_physical
""")

# Elementwise ops whose output is bool.
COMPARISON = _names("""
eq ne lt le gt ge isnan isinf isfinite isneginf isposinf signbit logical_and logical_or logical_xor
logical_not isclose
""")

# Ops that only write their first argument (fills and random number generation).
WRITE_ONLY = _names("""
fill fill_ zero_ uniform_ normal_ bernoulli_ random_ exponential_ geometric_ cauchy_ log_normal_
""")

# Copies: read the source, write the destination (0 FLOPs).
COPIES = _names("clone contiguous _copy_from _copy_from_and_resize narrow_copy alias_copy")

# Reductions: op -> (position of the dim argument, output: "same" dtype | "index" (int64) |
# "bool" | "pair" (two outputs of the input dtype) | "value_index" (values and int64 indices)).
REDUCTIONS: dict[str, tuple[int, str]] = {
    "sum": (1, "same"), "nansum": (1, "same"), "mean": (1, "same"), "nanmean": (1, "same"),
    "prod": (1, "same"), "amax": (1, "same"), "amin": (1, "same"), "max": (1, "value_index"),
    "min": (1, "value_index"), "argmax": (1, "index"), "argmin": (1, "index"), "all": (1, "bool"),
    "any": (1, "bool"), "norm": (2, "same"), "linalg_vector_norm": (2, "same"), "var": (1, "same"),
    "std": (1, "same"), "var_mean": (1, "pair"), "std_mean": (1, "pair"), "aminmax": (1, "pair"),
    "logsumexp": (1, "same"), "count_nonzero": (1, "index"),
}

# Fused optimizer steps: op -> (TensorList arguments read, written, FLOPs per parameter element).
OPTIMIZERS: dict[str, tuple[int, int, float]] = {
    "_fused_adam_": (4, 3, 12.0), "_fused_adamw_": (4, 3, 12.0), "_fused_sgd_": (3, 2, 4.0),
}


def _out_bytes(n: float, dtype: str | None) -> float | None:
    size = DTYPE_SIZE.get(dtype or "")
    return None if size is None else n * size


def elementwise(name: str, a: OpArgs) -> OpCost | None:
    """Unary/binary/ternary elementwise ops with broadcasting; in-place ops write argument 0."""
    ts = a.tensors()
    if not ts:
        return None
    base = name.rstrip("_")
    inplace = name.endswith("_") and not name.endswith("__")
    out_shape = ts[0].dims if inplace or len(ts) == 1 else broadcast([t.dims for t in ts])
    if out_shape is None:
        return None
    n = math.prod(out_shape)
    out_dtype: str | None
    if base in COMPARISON:
        out_dtype = "bool"
    elif inplace:
        out_dtype = ts[0].dtype
    else:
        out_dtype = result_dtype(ts)
    written = _out_bytes(n, out_dtype)
    if written is None:
        return None
    read = sum(t.read_bytes for t in ts)
    flops = 0.0 if base in ("where", "masked_fill", "flip", "roll", "tril", "triu") else float(n)
    return OpCost(flops, read + written, result_dtype(ts))


def dropout(name: str, a: OpArgs) -> OpCost | None:
    """native_dropout(input, p, train): reads x, writes y and a bool mask."""
    x = a.tensor(0)
    if x is None:
        return None
    return OpCost(float(x.numel), x.read_bytes + x.nbytes + x.numel, x.dtype)


def write_only(name: str, a: OpArgs) -> OpCost | None:
    """fill_/zero_/uniform_/...: write every element of argument 0 once."""
    x = a.tensor(0)
    if x is None:
        return None
    return OpCost(0.0, x.nbytes, x.dtype)


def copy_(name: str, a: OpArgs) -> OpCost | None:
    """copy_(dst, src, non_blocking): read src, write dst (a cast when their dtypes differ)."""
    dst, src = a.tensor(0), a.tensor(1)
    if dst is None or src is None:
        return None
    return OpCost(0.0, src.read_bytes + dst.nbytes, dst.dtype)


def copy(name: str, a: OpArgs) -> OpCost | None:
    """clone/contiguous/...: read argument 0, write a new tensor of the same shape and dtype."""
    x = a.tensor(0)
    if x is None:
        return None
    return OpCost(0.0, x.read_bytes + x.nbytes, x.dtype)


def to_copy(name: str, a: OpArgs) -> OpCost | None:
    """_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format): a cast."""
    x = a.tensor(0)
    if x is None:
        return None
    code = a.value(1)
    out_dtype = SCALAR_TYPE_CODES.get(code) if isinstance(code, int) else x.dtype
    written = _out_bytes(x.numel, out_dtype)
    if written is None:
        return None
    return OpCost(0.0, x.read_bytes + written, out_dtype)


def cat(name: str, a: OpArgs) -> OpCost | None:
    """cat/stack(tensors, dim): read every input, write them all again; TensorList dtypes are not
    recorded, so bytes come from the element size in the kernel name (list_elems)."""
    shapes = a.tensor_list(0)
    if not shapes:
        return None
    elems = float(sum(math.prod(s) for s in shapes))
    return OpCost(0.0, None, None, list_elems=2 * elems)


def foreach(name: str, a: OpArgs) -> OpCost | None:
    """_foreach_<op>(list, list|scalar...): each TensorList read once; in-place ops write list 0,
    others write a new list shaped like list 0. FLOPs: one per element of list 0."""
    lists = [s for s in (a.tensor_list(i) for i in range(len(a.dims))) if s]
    if not lists:
        return None
    first = float(sum(math.prod(s) for s in lists[0]))
    read = sum(float(sum(math.prod(s) for s in lst)) for lst in lists)
    flops = 0.0 if name.startswith(("_foreach_copy", "_foreach_zero")) else first
    if name.startswith("_foreach_zero"):
        read = 0.0
    return OpCost(flops, None, None, list_elems=read + first)


def optimizer(name: str, a: OpArgs) -> OpCost | None:
    """_fused_adam_/_fused_adamw_/_fused_sgd_: per parameter element, read params, grads and the
    optimizer state, write params and state (approximate FLOPs per element in OPTIMIZERS)."""
    params = a.tensor_list(0)
    if not params:
        return None
    reads, writes, per = OPTIMIZERS[name]
    n = float(sum(math.prod(s) for s in params))
    return OpCost(per * n, None, None, list_elems=(reads + writes) * n)


def reduction(name: str, a: OpArgs) -> OpCost | None:
    """Reductions over the dims in `Concrete Inputs` (absent or [] = all dims); output by REDUCTIONS."""
    x = a.tensor(0)
    if x is None:
        return None
    if name in ("max", "min") and a.tensor(1) is not None:
        return elementwise(name, a)  # max(x, y): the elementwise overload
    dim_pos, kind = REDUCTIONS[name]
    dims = _reduced_dims(a, dim_pos, len(x.dims))
    if dims is None:
        return None
    out = math.prod(d for i, d in enumerate(x.dims) if i not in dims) if x.dims else 1
    if kind == "value_index" and not (dim_pos < len(a.types) and a.types[dim_pos] == "Scalar"):
        kind = "same"  # max(x) / min(x) without a dim: one value, no indices
    per_out = {"same": x.itemsize, "index": 8, "bool": 1, "pair": 2 * x.itemsize,
               "value_index": x.itemsize + 8}[kind]
    return OpCost(float(x.numel), x.read_bytes + out * per_out, x.dtype)


def topk(name: str, a: OpArgs) -> OpCost | None:
    """topk(x, k, dim): a radix select reading x once per 8-bit digit of its element (PyTorch's
    multi-block top-k, RADIX_BITS = 8: itemsize counting passes), writing k values and int64 indices
    per row; one comparison per element and pass."""
    x, k = a.tensor(0), a.value(1)
    if x is None or not x.dims or not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return None
    dim = a.value(2)
    dim = dim if isinstance(dim, int) and not isinstance(dim, bool) and -len(x.dims) <= dim < len(x.dims) else -1
    rows = x.numel / max(x.dims[dim], 1)  # the selections: one per slice along `dim` (the last by default)
    passes = max(x.itemsize, 1)
    return OpCost(float(x.numel * passes), x.read_bytes * passes + rows * k * (x.itemsize + 8), x.dtype)


def _reduced_dims(a: OpArgs, pos: int, ndim: int) -> set[int] | None:
    """The reduced dims (normalised to >= 0), all dims when the op reduces everything, or None."""
    kind = a.types[pos] if pos < len(a.types) else ""
    value = a.value(pos)
    if kind in ("ScalarList", "GenericList", "Scalar", "Int") and value is None:
        return None  # the dims exist but the profiler did not record them (no Concrete Inputs)
    if value is None or value == []:
        return set(range(ndim))
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return {v % ndim for v in values} if ndim else set()


POINTWISE_MODELS: dict[str, Model] = {
    **{n: elementwise for n in ARITHMETIC | COMPARISON},
    **{n: write_only for n in WRITE_ONLY},
    **{n: copy for n in COPIES},
    **{n: reduction for n in REDUCTIONS},
    **{n: optimizer for n in OPTIMIZERS},
    "native_dropout": dropout,
    "copy_": copy_,
    "_to_copy": to_copy,
    "cat": cat,
    "_cat": cat,
    "stack": cat,
    "topk": topk,
}
