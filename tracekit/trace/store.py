"""Raw JSON of each op's input args (dims, types, strides, concrete inputs), decoded on demand."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from tracekit.trace import tables as T
from tracekit.trace.args import NULL

INPUT_COLUMNS = (T.OP_INPUT_DIMS, T.OP_INPUT_TYPES, T.OP_INPUT_STRIDES, T.OP_CONCRETE_INPUTS)
_DECODER = msgspec.json.Decoder()


class OpInputStore:
    """One bytes buffer holding, per op and input column, the raw JSON value (or nothing)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._starts: list[np.ndarray] = []
        self._ends: list[np.ndarray] = []
        self.starts = np.zeros((0, len(INPUT_COLUMNS)), dtype=np.int64)
        self.ends = np.zeros((0, len(INPUT_COLUMNS)), dtype=np.int64)

    def append(self, raws: list) -> None:
        """Add the raw values (msgspec.Raw; NULL when absent) of a batch of ops, flattened row-major:
        len(INPUT_COLUMNS) values per op."""
        lengths = np.fromiter((0 if r is NULL else len(r) for r in raws), dtype=np.int64, count=len(raws))
        ends = len(self._buf) + np.cumsum(lengths)
        self._buf += b"".join([r for r in raws if r is not NULL])
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
        """Decoded values of `rows`, per input column (None where the op recorded none)."""
        out = {}
        view = memoryview(self._buf)
        for j, col in enumerate(INPUT_COLUMNS):
            parts = []
            for r in rows.tolist():
                s, e = self.starts[r, j], self.ends[r, j]
                parts.append(view[s:e] if e > s else b"null")
            out[col] = _DECODER.decode(b"[" + b",".join(parts) + b"]") if parts else []
        return out

    def row(self, row: int) -> dict[str, Any]:
        decoded = self.decode_rows(np.array([row]))
        return {col: values[0] for col, values in decoded.items()}

    @property
    def nbytes(self) -> int:
        return len(self._buf) + self.starts.nbytes + self.ends.nbytes
