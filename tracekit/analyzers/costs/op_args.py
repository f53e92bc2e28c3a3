"""Reading recorded op arguments: dtype names and sizes, tensor sizes, broadcasting, concrete values."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

# `Input type` string of a tensor argument -> (short dtype name, bytes per element).
DTYPES: dict[str, tuple[str, float]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "c10::Float4_e2m1fn_x2": ("fp4", 1),  # two fp4 values per byte, one element per byte
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int64_t": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "unsigned short": ("uint16", 2),
    "unsigned int": ("uint32", 4),
    "unsigned long": ("uint64", 8),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
    "c10::complex<c10::Half>": ("complex32", 4),
    "c10::qint8": ("qint8", 1),
    "c10::quint8": ("quint8", 1),
    "c10::qint32": ("qint32", 4),
}

# Short dtype name -> bytes per element (also the names that `dtype` columns use).
DTYPE_SIZE: dict[str, float] = {short: size for short, size in DTYPES.values()}

# torch ScalarType codes, as `Concrete Inputs` records a dtype argument (e.g. `.to(torch.bfloat16)`).
SCALAR_TYPE_CODES: dict[int, str] = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16", 6: "fp32", 7: "fp64",
    8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "qint8", 13: "quint8",
    14: "qint32", 15: "bf16", 23: "fp8", 24: "fp8", 25: "fp8", 26: "fp8",
}

FLOAT_RANK = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 3, "fp64": 4}


@dataclass(frozen=True)
class Tensor:
    """One tensor argument as recorded: shape, element size, dtype name, strides (None if absent)."""

    dims: tuple[int, ...]
    dtype: str
    itemsize: float
    strides: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def unique(self) -> int:
        """Distinct elements in memory: dimensions with stride 0 (broadcast views) count once."""
        if self.strides is None or len(self.strides) != len(self.dims):
            return self.numel
        return math.prod(d for d, s in zip(self.dims, self.strides, strict=True) if s != 0)

    @property
    def nbytes(self) -> float:
        """Bytes of the whole tensor as the op sees it (numel x itemsize)."""
        return self.numel * self.itemsize

    @property
    def read_bytes(self) -> float:
        """Bytes an op must read from memory to see every element once (broadcast dims once)."""
        return self.unique * self.itemsize


@dataclass(frozen=True)
class OpArgs:
    """The recorded arguments of one op call, position by position."""

    dims: tuple[Any, ...]
    types: tuple[str, ...]
    strides: tuple[Any, ...]
    concrete: tuple[object, ...]  # text of each scalar argument (as recorded: any JSON scalar)

    @classmethod
    def of(cls, dims: Sequence[object] | None, types: Sequence[str] | None,
           strides: Sequence[object] | None = None,
           concrete: Sequence[object] | None = None) -> OpArgs:
        """An op call's recorded argument lists (decoded JSON lists as trace/store.py checked them,
        None where the op recorded none), each padded to the length of `dims`."""
        dims_t = tuple(dims or ())
        n = len(dims_t)
        return cls(
            dims=dims_t,
            types=_pad(types, n, ""),
            strides=_pad(strides, n, None),
            concrete=_pad(concrete, n, ""),
        )

    def reads_sparse(self) -> bool:
        """Whether a tensor argument of more than one dimension recorded no strides (an empty list): a
        sparse (COO/CSR) tensor, whose work depends on its stored entries, not its shape."""
        return any(isinstance(d, list) and len(d) >= 2 and s == [] and t in DTYPES
                   for d, s, t in zip(self.dims, self.strides, self.types, strict=True))

    def tensor(self, i: int) -> Tensor | None:
        """Argument i as a Tensor, or None when it is absent, not a tensor, or of unknown dtype."""
        if i >= len(self.dims) or i < 0:
            return None
        info = DTYPES.get(self.types[i])
        dims = self.dims[i]
        if info is None or not _is_shape(dims):
            return None
        strides = self.strides[i]
        st = tuple(int(s) for s in strides) if _is_shape(strides) else None
        return Tensor(tuple(int(d) for d in dims), info[0], info[1], st)

    def tensors(self) -> list[Tensor]:
        """Every tensor argument, in order."""
        return [t for t in (self.tensor(i) for i in range(len(self.dims))) if t is not None]

    def tensor_list(self, i: int) -> list[tuple[int, ...]] | None:
        """Argument i as the shapes of a TensorList (dtype is not recorded for lists)."""
        if i >= len(self.dims) or self.types[i] not in ("TensorList", "GenericList"):
            return None
        dims = self.dims[i]
        if not isinstance(dims, list) or not all(_is_shape(d) for d in dims):
            return None
        return [tuple(int(x) for x in d) for d in dims]

    def value(self, i: int) -> Any:
        """Argument i's concrete value parsed as a Python literal (int, float, bool, list), or None."""
        if i >= len(self.concrete):
            return None
        return parse_literal(self.concrete[i])

    def int_list(self, i: int, ndim: int) -> tuple[int, ...] | None:
        """Argument i as `ndim` ints (a single int is repeated, as torch does), or None."""
        v = self.value(i)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return (v,) * ndim
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            if len(v) == 1:
                return (int(v[0]),) * ndim
            return tuple(int(x) for x in v) if len(v) == ndim else None
        return None


_Item = TypeVar("_Item")


def _pad(values: Sequence[_Item] | None, n: int, fill: _Item) -> tuple[_Item, ...]:
    out = list(values or ())[:n]
    return tuple(out + [fill] * (n - len(out)))


def _is_shape(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def parse_literal(text: object) -> Any:
    """A `Concrete Inputs` string as a Python value: '4096' -> 4096, 'True' -> True, '[1, 1]' -> [1, 1]."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def broadcast(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The broadcast shape of `shapes` (numpy rules), or None when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, d in enumerate(shape, start=ndim - len(shape)):
            if d == out[i] or d == 1:
                continue
            if out[i] != 1:
                return None
            out[i] = d
    return tuple(out)


def widest_float(dtypes: Sequence[str]) -> str | None:
    """The dtype an arithmetic op's result takes: the widest floating input, else the first input."""
    floats = [d for d in dtypes if d in FLOAT_RANK]
    if floats:
        return max(floats, key=lambda d: FLOAT_RANK[d])
    return dtypes[0] if dtypes else None


def result_dtype(tensors: Sequence[Tensor]) -> str | None:
    """torch's type promotion for an elementwise op's result: tensors with dimensions decide; 0-dim
    tensors (wrapped Python numbers such as `x * 0.5`, recorded as 'double') only lift an integer
    result to the default float dtype, or decide when every operand is 0-dim."""
    dimensioned = [t.dtype for t in tensors if t.dims]
    if not dimensioned:
        return widest_float([t.dtype for t in tensors])
    out = widest_float(dimensioned)
    if out not in FLOAT_RANK and any(t.dtype in FLOAT_RANK for t in tensors if not t.dims):
        return "fp32"
    return out


# The tensor shapes of an op call as the analyzers keep them (hashable, for grouping): one entry
# per tensor argument with dimensions, in order, e.g. ((4096, 4096), (4096,)); a TensorList
# argument is a tuple of shapes. Scalars and 0-dim tensors are left out.
Shapes = tuple[Any, ...]


def shapes_of(dims: Sequence[object] | None) -> Shapes | None:
    """The Shapes of an op call's recorded `Input Dims` (None when no argument has dimensions)."""
    if not dims:
        return None
    parts = tuple(_freeze(d) for d in dims if isinstance(d, list) and d)
    return parts or None


def _freeze(value: object) -> object:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def format_shapes(shapes: Shapes | str | None) -> str | None:
    """Shapes as one string, '[4096, 4096], [4096]' (how the JSON documents write them); a string
    (a rule's own "q [..], k [..]") as it is."""
    if isinstance(shapes, str):
        return shapes or None
    if not shapes:
        return None
    return ", ".join(_text(part) for part in shapes)


def _text(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


LONGEST = "longest"  # the longest kernel of the op call that does the work gets the whole cost
SPLIT = "split"  # the cost is split over the op call's working kernels in proportion to duration


@dataclass(frozen=True)
class OpCost:
    """What one op call costs: FLOPs and bytes moved (None = unknown) and the kernels doing it.

    `work` names the kernel classes that do the op's work (None: any kernel of the call);
    `list_elems` counts elements of TensorList arguments, whose dtype the profiler does not
    record: bytes = list_elems x the element size read from the kernel name, when it has one."""

    flops: float | None
    bytes: float | None
    dtype: str | None
    work: tuple[str, ...] | None = None
    pick: str = SPLIT
    list_elems: float | None = None


# The one signature of every per-op model: (op name without `aten::`, its recorded args) -> cost.
Model = Callable[[str, OpArgs], "OpCost | None"]


def user_gemm_flops(a: OpArgs, arg_names: object) -> float | None:
    """2*M*N*K for a user kernel with integer arguments named M, N, K whose values match a pair of
    2-D tensor arguments A[M, K] and B[K, N] or B[N, K] (e.g. matmul_kernel(a, b, c, M, N, K, ...);
    a weight in nn.Linear's layout, read transposed: held-out triton_softcap_head_row_order's
    x[8192, 2048] @ W[65536, 2048].T); None for any other kernel. `arg_names`: the kernel's parameter names, position by position."""
    if not isinstance(arg_names, list):
        return None
    values = {}
    for i, arg in enumerate(arg_names[: len(a.dims)]):
        if isinstance(arg, str) and arg.upper() in ("M", "N", "K"):
            v = a.value(i)
            if isinstance(v, int) and not isinstance(v, bool):
                values[arg.upper()] = v
    if len(values) != 3:
        return None
    m, n, k = values["M"], values["N"], values["K"]
    shapes = {t.dims for t in a.tensors()}
    if (m, k) in shapes and ((k, n) in shapes or (n, k) in shapes):
        return 2.0 * m * n * k
    return None
