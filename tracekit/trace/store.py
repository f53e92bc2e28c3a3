"""Raw JSON of each op's input args (dims, types, strides, concrete inputs), decoded on demand."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from tracekit.trace import tables

INPUT_COLUMNS = (tables.OP_INPUT_DIMS, tables.OP_INPUT_TYPES, tables.OP_INPUT_STRIDES, tables.OP_CONCRETE_INPUTS)
_DECODER = msgspec.json.Decoder()
MAX_DIM = 1 << 48  # a tensor size or stride beyond this is not a recorded shape
MAX_NDIM = 64


def _sizes(value: object) -> bool:
    """A list of at most MAX_NDIM ints below MAX_DIM in magnitude (one tensor's sizes or strides)."""
    return (value.__class__ is list and len(value) <= MAX_NDIM
            and all(v.__class__ is int and -MAX_DIM < v < MAX_DIM for v in value))


def _shape_arg(value: object) -> bool:
    """One argument of Input Dims / Input Strides: a tensor's sizes, or a list of them (TensorList)."""
    return _sizes(value) or (value.__class__ is list and all(_sizes(v) for v in value))


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float))


def _concrete_arg(value: object) -> bool:
    return _scalar(value) or (value.__class__ is list and all(_scalar(v) for v in value))


# column -> test of one argument's value; a recorded list with any argument failing it is ignored
VALID_ARG = {
    tables.OP_INPUT_DIMS: _shape_arg,
    tables.OP_INPUT_STRIDES: _shape_arg,
    tables.OP_INPUT_TYPES: lambda v: isinstance(v, str),
    tables.OP_CONCRETE_INPUTS: _concrete_arg,
}


def valid_input(column: str, value: object) -> bool:
    """Whether a decoded input column value has the shape tracekit reads (None counts as valid)."""
    if value is None:
        return True
    test = VALID_ARG[column]
    return value.__class__ is list and all(map(test, value))


class OpInputStore:
    """One bytes buffer holding, per op and input column, the raw JSON value (or nothing)."""

    def __init__(self) -> None:
        self._buf: bytes | bytearray = bytearray()
        self._starts: list[np.ndarray] = []
        self._ends: list[np.ndarray] = []
        self.starts = np.zeros((0, len(INPUT_COLUMNS)), dtype=np.int64)
        self.ends = np.zeros((0, len(INPUT_COLUMNS)), dtype=np.int64)
        self.rejected = 0  # decoded values of the wrong type, replaced by None
        self._by_raw: dict[tuple[str, bytes], tuple[Any, int]] = {}  # row(): (value, values rejected) per raw value

    def append(self, raws: list) -> None:
        """Add the raw values (msgspec.Raw; `null` when absent) of a batch of ops, flattened
        row-major: len(INPUT_COLUMNS) values per op."""
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
        ends = len(self._buf) + np.cumsum(lengths)
        self._buf += b"".join(raws)
        width = len(INPUT_COLUMNS)
        self._starts.append((ends - lengths).reshape(-1, width))
        self._ends.append(ends.reshape(-1, width))

    def seal(self, order: np.ndarray | None = None) -> None:
        """Finish appending; `order` re-arranges rows the way the ops table was sorted."""
        if self._starts:
            self.starts = np.concatenate(self._starts)
            self.ends = np.concatenate(self._ends)
        self._starts, self._ends = [], []
        self._buf = bytes(self._buf)
        if order is not None:
            self.starts, self.ends = self.starts[order], self.ends[order]

    def decode_rows(self, rows: np.ndarray) -> dict[str, list[Any]]:
        """Decoded values of `rows`, per input column (None where the op recorded none). Equal raw
        values decode once and share one object (steps repeat the same shapes): treat them as
        read-only."""
        out = {}
        buf = self._buf if isinstance(self._buf, bytes) else bytes(self._buf)
        for j, col in enumerate(INPUT_COLUMNS):
            starts, ends = self.starts[rows, j].tolist(), self.ends[rows, j].tolist()
            keys = [buf[s:e] for s, e in zip(starts, ends, strict=True)]  # b"": the op recorded none
            slot = dict.fromkeys(keys)  # the distinct raw values, in order of first appearance
            slot.pop(b"", None)
            uniques = list(slot)
            values = self._decode(uniques)
            for i, v in enumerate(values):
                if not valid_input(col, v):
                    values[i] = None
                    self.rejected += 1
            by_raw = dict(zip(uniques, values, strict=True))
            out[col] = [by_raw.get(k) for k in keys]
        return out

    def _decode(self, raws: list[bytes] | list[memoryview]) -> list[Any]:
        """Decoded raw values; one that msgspec cannot hold (a 400-digit number) becomes None."""
        if not raws:
            return []
        try:
            return _DECODER.decode(b"[" + b",".join(raws) + b"]")
        except (msgspec.DecodeError, RecursionError):
            values: list[Any] = []
            for raw in raws:
                try:
                    values.append(_DECODER.decode(raw))
                except (msgspec.DecodeError, RecursionError):
                    values.append(None)
                    self.rejected += 1
            return values

    def has_values(self, column: str) -> bool:
        """Whether any op recorded a (non-null) value for `column`."""
        j = INPUT_COLUMNS.index(column)
        view = memoryview(self._buf)
        return any(view[s:e] != b"null" for s, e in zip(self.starts[:, j].tolist(), self.ends[:, j].tolist(),
                                                        strict=True))

    def row(self, row: int) -> dict[str, Any]:
        """The decoded values of one row (as decode_rows of that row alone). Values decode once per
        distinct raw text and are shared between calls: treat them as read-only."""
        buf = self._buf if isinstance(self._buf, bytes) else bytes(self._buf)
        return {col: self._value(col, buf[s:e]) if e > s else None
                for col, s, e in zip(INPUT_COLUMNS, self.starts[row].tolist(), self.ends[row].tolist(), strict=True)}

    def values(self, rows: np.ndarray, column: str) -> list[Any]:
        """The decoded values of `column` for `rows`, as row(r)[column] of each (shared objects)."""
        j = INPUT_COLUMNS.index(column)
        buf = self._buf if isinstance(self._buf, bytes) else bytes(self._buf)
        return [self._value(column, buf[s:e]) if e > s else None
                for s, e in zip(self.starts[rows, j].tolist(), self.ends[rows, j].tolist(), strict=True)]

    def _value(self, column: str, raw: bytes) -> Any:
        """One decoded value, decoded once per distinct raw text and shared between calls."""
        key = (column, raw)
        got = self._by_raw.get(key)
        if got is None:
            before = self.rejected
            value = self._decode([raw])[0]
            valid = valid_input(column, value)
            got = self._by_raw[key] = (value if valid else None, self.rejected - before + (not valid))
            self.rejected = before
        self.rejected += got[1]  # counted on every call, as when each call decoded
        return got[0]

    def raw_values(self, rows: np.ndarray, column: str) -> list[bytes]:
        """The raw JSON bytes of `column` for `rows` (b"" where the op recorded nothing)."""
        j = INPUT_COLUMNS.index(column)
        buf = self._buf
        return [bytes(buf[s:e]) for s, e in zip(self.starts[rows, j].tolist(), self.ends[rows, j].tolist(),
                                                strict=True)]

    def appended(self, other: OpInputStore, rows: np.ndarray) -> OpInputStore:
        """A new store: this one's rows, then `other`'s `rows` (ops copied from another trace)."""
        out = OpInputStore()
        out._buf = bytes(self._buf) + bytes(other._buf)
        shift = len(self._buf)
        out.starts = np.concatenate([self.starts, other.starts[rows] + shift])
        out.ends = np.concatenate([self.ends, other.ends[rows] + shift])
        return out

    @property
    def nbytes(self) -> int:
        return len(self._buf) + self.starts.nbytes + self.ends.nbytes
