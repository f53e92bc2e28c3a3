"""FLOPs/bytes models of normalization, softmax, embedding/gather, loss and pooling ops.

Bytes are compulsory traffic (inputs once, outputs once), with one exception: training-mode batch
norm needs the whole batch's statistics before it can write any output, so it reads its input
twice (forward) and its input and gradient twice (backward). Statistics (mean, rstd) are fp32 for
half inputs. FLOPs are approximate per-element counts (NORM_FLOPS...); these ops are memory-bound."""

from __future__ import annotations

import math

from tracekit.analyzers.costs.op_args import (
    DTYPE_SIZE,
    SCALAR_TYPE_CODES,
    Model,
    OpArgs,
    OpCost,
    Tensor,
)

NORM_FLOPS = 5.0  # per element, forward: statistics (2), normalize (2), affine (1)
NORM_BWD_FLOPS = 10.0
SOFTMAX_FLOPS = 5.0  # max, subtract, exp, sum, divide
SOFTMAX_BWD_FLOPS = 3.0
LOSS_FLOPS = 3.0


def _stat_size(x: Tensor) -> float:
    return 8.0 if x.dtype == "fp64" else 4.0


def _opt(t: Tensor | None) -> float:
    return t.read_bytes if t is not None else 0.0


def _mask(a: OpArgs, pos: int, n: int) -> list[bool]:
    v = a.value(pos)
    if isinstance(v, list) and len(v) >= n:
        return [bool(x) for x in v[:n]]
    return [True] * n


def _rows(x: Tensor, a: OpArgs, shape_pos: int, weight: Tensor | None) -> int | None:
    """Rows of a layer/RMS norm: numel / prod(normalized_shape)."""
    shape = a.value(shape_pos)
    if isinstance(shape, list) and shape and all(isinstance(s, int) for s in shape):
        inner = math.prod(shape)
    elif weight is not None and weight.dims:
        inner = weight.numel
    elif x.dims:
        inner = x.dims[-1]
    else:
        return None
    return x.numel // inner if inner else None


def layer_norm(name: str, a: OpArgs) -> OpCost | None:
    """native_layer_norm(x, normalized_shape, weight, bias, eps) / _fused_rms_norm(x, shape,
    weight, eps): read x, weight, bias; write y and per-row statistics (2 for layer, 1 for RMS)."""
    x = a.tensor(0)
    if x is None:
        return None
    rms = "rms" in name
    w, b = a.tensor(2), (None if rms else a.tensor(3))
    rows = _rows(x, a, 1, w)
    if rows is None:
        return None
    stats = rows * _stat_size(x) * (1 if rms else 2)
    total = x.read_bytes + _opt(w) + _opt(b) + x.nbytes + stats
    return OpCost(NORM_FLOPS * x.numel, total, x.dtype)


def layer_norm_backward(name: str, a: OpArgs) -> OpCost | None:
    """native_layer_norm_backward(dy, x, shape, mean, rstd, w, b, mask) / _fused_rms_norm_backward(
    dy, x, shape, rstd, w, mask): read dy, x, stats, w; write dx and (by mask) dw, db."""
    dy, x = a.tensor(0), a.tensor(1)
    if dy is None or x is None:
        return None
    rms = "rms" in name
    stats = [a.tensor(3)] if rms else [a.tensor(3), a.tensor(4)]
    w = a.tensor(4 if rms else 5)
    mask = _mask(a, 5 if rms else 7, 2 if rms else 3)
    read = dy.read_bytes + x.read_bytes + sum(_opt(s) for s in stats) + _opt(w)
    wsize = w.nbytes if w is not None else 0.0
    written = (x.nbytes if mask[0] else 0) + sum(wsize for m in mask[1:] if m)
    return OpCost(NORM_BWD_FLOPS * x.numel, read + written, x.dtype)


# batch norm forward ops -> position of the `training` flag
BATCH_NORM_TRAINING = {
    "native_batch_norm": 5, "cudnn_batch_norm": 5, "miopen_batch_norm": 5, "batch_norm": 5,
    "_batch_norm_impl_index": 5, "_native_batch_norm_legit": 5,
    "_native_batch_norm_legit_no_training": -1, "_batch_norm_with_update": -2,
}


def batch_norm(name: str, a: OpArgs) -> OpCost | None:
    """Batch norm forward: read x (twice when training), weight, bias, running stats; write y."""
    x = a.tensor(0)
    if x is None or len(x.dims) < 2:
        return None
    pos = BATCH_NORM_TRAINING[name]
    training = pos == -2 or (pos >= 0 and a.value(pos) is True)
    params = sum(_opt(a.tensor(i)) for i in range(1, 5))
    total = x.read_bytes * (2 if training else 1) + params + x.nbytes
    return OpCost(NORM_FLOPS * x.numel, total, x.dtype)


def batch_norm_backward(name: str, a: OpArgs) -> OpCost | None:
    """native_batch_norm_backward(dy, x, w, rmean, rvar, smean, sinvstd, train, eps, mask) and
    cudnn/miopen_batch_norm_backward(x, dy, w, ...): read dy and x (twice: the weight/bias
    gradients are sums over the batch needed before dx), write dx, dw, db."""
    native = name.startswith("native")
    dy, x = (a.tensor(0), a.tensor(1)) if native else (a.tensor(1), a.tensor(0))
    if dy is None or x is None:
        return None
    w = a.tensor(2)
    training = a.value(7) is not False if native else True
    passes = 2 if training else 1
    mask = _mask(a, 9, 3) if native else [True] * 3
    wsize = w.nbytes if w is not None else x.dims[1] * x.itemsize
    read = passes * (dy.read_bytes + x.read_bytes) + _opt(w)
    written = (x.nbytes if mask[0] else 0) + sum(wsize for m in mask[1:] if m)
    return OpCost(NORM_BWD_FLOPS * x.numel, read + written, x.dtype)


def group_norm(name: str, a: OpArgs) -> OpCost | None:
    """native_group_norm(x, w, b, N, C, HxW, group, eps): read x, w, b; write y, mean, rstd."""
    x = a.tensor(0)
    if x is None or not x.dims:
        return None
    groups = a.value(6) if name == "native_group_norm" else a.value(1)
    stats = x.dims[0] * groups * 2 * _stat_size(x) if isinstance(groups, int) else 0.0
    w, b = (a.tensor(1), a.tensor(2)) if name == "native_group_norm" else (a.tensor(2), a.tensor(3))
    total = x.read_bytes + _opt(w) + _opt(b) + x.nbytes + stats
    return OpCost(NORM_FLOPS * x.numel, total, x.dtype)


def group_norm_backward(name: str, a: OpArgs) -> OpCost | None:
    """native_group_norm_backward(dy, x, mean, rstd, w, N, C, HxW, group, mask)."""
    dy, x = a.tensor(0), a.tensor(1)
    if dy is None or x is None:
        return None
    w = a.tensor(4)
    mask = _mask(a, 9, 3)
    read = dy.read_bytes + x.read_bytes + _opt(a.tensor(2)) + _opt(a.tensor(3)) + _opt(w)
    wsize = w.nbytes if w is not None else (x.dims[1] * x.itemsize if len(x.dims) > 1 else 0)
    written = (x.nbytes if mask[0] else 0) + sum(wsize for m in mask[1:] if m)
    return OpCost(NORM_BWD_FLOPS * x.numel, read + written, x.dtype)


def softmax(name: str, a: OpArgs) -> OpCost | None:
    """_softmax/_log_softmax(x, dim, half_to_float) and softmax(x, dim, dtype): read x, write y."""
    x = a.tensor(0)
    if x is None:
        return None
    flag = a.value(2)
    out = x.dtype
    if name.startswith("_") and flag is True:
        out = "fp32"
    elif not name.startswith("_") and isinstance(flag, int) and not isinstance(flag, bool):
        out = SCALAR_TYPE_CODES.get(flag, x.dtype)
    total = x.read_bytes + x.numel * DTYPE_SIZE.get(out, x.itemsize)
    return OpCost(SOFTMAX_FLOPS * x.numel, total, x.dtype)


def softmax_backward(name: str, a: OpArgs) -> OpCost | None:
    """_softmax_backward_data / _log_softmax_backward_data(dy, y, dim, input_dtype)."""
    dy, y = a.tensor(0), a.tensor(1)
    if dy is None or y is None:
        return None
    code = a.value(3)
    out = SCALAR_TYPE_CODES.get(code, dy.dtype) if isinstance(code, int) else dy.dtype
    total = dy.read_bytes + y.read_bytes + dy.numel * DTYPE_SIZE.get(out, dy.itemsize)
    return OpCost(SOFTMAX_BWD_FLOPS * dy.numel, total, dy.dtype)


def _gathered(src: Tensor, out_elems: float, index: Tensor | None) -> OpCost:
    """Read out_elems elements of src (at most all of src) and the index; write out_elems."""
    read = min(out_elems, src.unique) * src.itemsize + _opt(index)
    return OpCost(0.0, read + out_elems * src.itemsize, src.dtype)


def embedding(name: str, a: OpArgs) -> OpCost | None:
    """embedding(weight[V, D], indices): one D-row per index."""
    w, idx = a.tensor(0), a.tensor(1)
    if w is None or idx is None or len(w.dims) != 2:
        return None
    return _gathered(w, idx.numel * w.dims[1], idx)


def index_select(name: str, a: OpArgs) -> OpCost | None:
    """index_select(self, dim, index): self's slices along dim at the indices."""
    x, idx = a.tensor(0), a.tensor(2)
    dim = a.value(1)
    if x is None or idx is None or not isinstance(dim, int) or not x.dims:
        return None
    size = x.dims[dim % len(x.dims)]
    return _gathered(x, x.numel // max(size, 1) * idx.numel, idx)


def gather(name: str, a: OpArgs) -> OpCost | None:
    """gather(self, dim, index): one element of self per index element."""
    x, idx = a.tensor(0), a.tensor(2)
    if x is None or idx is None:
        return None
    return _gathered(x, idx.numel, idx)


def index_write(name: str, a: OpArgs) -> OpCost | None:
    """index_copy_(self, dim, index, source) / index_add_(..., alpha) and scatter_(self, dim, index,
    src) / scatter_add_: read the index and the source, write as many elements of self (the KV-cache
    update of a decode step); the add variants also read the elements they add to."""
    x, idx, src = a.tensor(0), a.tensor(2), a.tensor(3)
    if x is None or idx is None:
        return None
    n = src.numel if name.startswith("index") and src is not None else idx.numel
    read = idx.read_bytes + (src.read_bytes if src is not None else 0.0)
    adds = "add" in name or "reduce" in name
    total = read + n * x.itemsize * (2 if adds else 1)
    return OpCost(float(n) if adds else 0.0, total, x.dtype)


def arange(name: str, a: OpArgs) -> OpCost | None:
    """arange(end | start, end[, step], dtype, ...): write ceil((end - start) / step) elements
    (int64 when the bounds are ints and no dtype is given, else fp32 or the given dtype)."""
    nvals = len(a.dims) - 4  # arange(end | start, end | start, end, step, dtype, layout, device, pin)
    values = [a.value(i) for i in range(max(nvals, 0))]
    if not 1 <= nvals <= 3 or not all(isinstance(v, (int, float)) for v in values):
        return None
    start, end, step = (0, values[0], 1) if len(values) == 1 else (*values[:2], 1)
    step = values[2] if len(values) == 3 else step
    if not step:
        return None
    n = max(0, math.ceil((end - start) / step))
    code = a.value(nvals)
    if isinstance(code, int) and not isinstance(code, bool):
        dtype = SCALAR_TYPE_CODES.get(code)
    else:
        dtype = "int64" if all(isinstance(v, int) for v in values) else "fp32"
    size = DTYPE_SIZE.get(dtype or "")
    return None if size is None else OpCost(0.0, float(n * size), dtype)


def embedding_backward(name: str, a: OpArgs) -> OpCost | None:
    """embedding_dense_backward(dy, indices, num_weights, padding_idx, scale): write a
    [num_weights, D] gradient from dy rows."""
    dy, idx = a.tensor(0), a.tensor(1)
    rows = a.value(2)
    if dy is None or idx is None or not isinstance(rows, int) or not dy.dims:
        return None
    written = rows * dy.dims[-1] * dy.itemsize
    return OpCost(float(dy.numel), dy.read_bytes + idx.read_bytes + written, dy.dtype)


def nll_loss(name: str, a: OpArgs) -> OpCost | None:
    """nll_loss_forward / nll_loss2d_forward(x[N, C, ...], target[N, ...], weight, reduction, ...):
    read the target and one x element per target; write one value (or N with reduction none)."""
    x, t = a.tensor(0), a.tensor(1)
    if x is None or t is None:
        return None
    n = t.numel
    out = n if a.value(3) == 0 else 1
    return OpCost(float(n), t.read_bytes + n * x.itemsize + out * x.itemsize, x.dtype)


def nll_loss_backward(name: str, a: OpArgs) -> OpCost | None:
    """nll_loss_backward(dy, x, target, ...): write one gradient element per target."""
    x, t = a.tensor(1), a.tensor(2)
    if x is None or t is None:
        return None
    return OpCost(float(t.numel), t.read_bytes + _opt(a.tensor(0)) + t.numel * x.itemsize, x.dtype)


# loss op -> position of its `reduction` argument (0 = none, 1 = mean, 2 = sum)
LOSS_REDUCTION = {"binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 4}


def pointwise_loss(name: str, a: OpArgs) -> OpCost | None:
    """mse/l1/smooth_l1/huber/binary_cross_entropy(x, target, ..., reduction): read both, write
    one value (or every element with reduction none = 0)."""
    x, t = a.tensor(0), a.tensor(1)
    if x is None or t is None:
        return None
    out = x.numel if a.value(LOSS_REDUCTION.get(name, 2)) == 0 else 1
    total = x.read_bytes + t.read_bytes + out * x.itemsize
    return OpCost(LOSS_FLOPS * x.numel, total, x.dtype)


def pointwise_loss_backward(name: str, a: OpArgs) -> OpCost | None:
    """mse_loss_backward(dy, x, target, reduction) and the like: read dy, x, target; write dx."""
    dy, x, t = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is None or t is None:
        return None
    total = _opt(dy) + x.read_bytes + t.read_bytes + x.nbytes
    return OpCost(LOSS_FLOPS * x.numel, total, x.dtype)


def max_pool(name: str, a: OpArgs) -> OpCost | None:
    """max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode): write values and
    int64 indices; output size from `Concrete Inputs` (unknown without them)."""
    x = a.tensor(0)
    if x is None or len(x.dims) < 3:
        return None
    nd = 2 if "2d" in name else 3
    kernel = a.int_list(1, nd)
    stride = a.int_list(2, nd) or kernel
    padding = a.int_list(3, nd) or (0,) * nd
    dilation = a.int_list(4, nd) or (1,) * nd
    if kernel is None or stride is None:
        return None
    ceil = a.value(5) is True
    rnd = math.ceil if ceil else math.floor
    out = [rnd((s + 2 * p - d * (k - 1) - 1) / st) + 1
           for s, k, st, p, d in zip(x.dims[-nd:], kernel, stride, padding, dilation, strict=True)]
    n = math.prod(x.dims[:-nd]) * math.prod(out)
    return OpCost(float(n * math.prod(kernel)), x.read_bytes + n * (x.itemsize + 8), x.dtype)


def pool_backward(name: str, a: OpArgs) -> OpCost | None:
    """max_pool*_with_indices_backward / avg_pool*_backward / _adaptive_avg_pool*_backward(dy, x,
    ..., [indices]): read dy (and indices), write dx shaped like x."""
    dy, x = a.tensor(0), a.tensor(1)
    if dy is None or x is None:
        return None
    idx = a.tensor(len(a.dims) - 1) if "max" in name else None
    return OpCost(float(x.numel), dy.read_bytes + _opt(idx) + x.nbytes, x.dtype)


def adaptive_avg_pool(name: str, a: OpArgs) -> OpCost | None:
    """_adaptive_avg_pool2d(x, output_size): read x, write N*C*prod(output_size)."""
    x = a.tensor(0)
    size = a.value(1)
    if x is None or not isinstance(size, list) or len(x.dims) < 3:
        return None
    n = math.prod(x.dims[: len(x.dims) - len(size)]) * math.prod(size)
    return OpCost(float(x.numel), x.read_bytes + n * x.itemsize, x.dtype)


NN_MODELS: dict[str, Model] = {
    "native_layer_norm": layer_norm, "layer_norm": layer_norm, "_fused_rms_norm": layer_norm,
    "rms_norm": layer_norm, "native_layer_norm_backward": layer_norm_backward,
    "_fused_rms_norm_backward": layer_norm_backward,
    **{n: batch_norm for n in BATCH_NORM_TRAINING},
    "native_batch_norm_backward": batch_norm_backward,
    "cudnn_batch_norm_backward": batch_norm_backward,
    "miopen_batch_norm_backward": batch_norm_backward,
    "native_group_norm": group_norm, "group_norm": group_norm,
    "native_group_norm_backward": group_norm_backward,
    "_softmax": softmax, "_log_softmax": softmax, "softmax": softmax, "log_softmax": softmax,
    "_softmax_backward_data": softmax_backward, "_log_softmax_backward_data": softmax_backward,
    "embedding": embedding, "index_select": index_select, "gather": gather,
    "embedding_dense_backward": embedding_backward,
    **{n: index_write for n in ("index_copy_", "index_copy", "index_add_", "index_add", "scatter_",
                                "scatter", "scatter_add_", "scatter_add", "scatter_reduce_",
                                "scatter_reduce")},
    "arange": arange,
    "nll_loss_forward": nll_loss, "nll_loss2d_forward": nll_loss,
    "nll_loss_backward": nll_loss_backward, "nll_loss2d_backward": nll_loss_backward,
    **{n: pointwise_loss for n in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                                   *LOSS_REDUCTION)},
    **{n: pointwise_loss_backward for n in ("mse_loss_backward", "smooth_l1_loss_backward",
                                            "huber_loss_backward", "binary_cross_entropy_backward")},
    "max_pool2d_with_indices": max_pool, "max_pool3d_with_indices": max_pool,
    "max_pool2d_with_indices_backward": pool_backward,
    "max_pool3d_with_indices_backward": pool_backward,
    "avg_pool2d_backward": pool_backward, "_adaptive_avg_pool2d_backward": pool_backward,
    "_adaptive_avg_pool2d": adaptive_avg_pool, "adaptive_avg_pool2d": adaptive_avg_pool,
}
