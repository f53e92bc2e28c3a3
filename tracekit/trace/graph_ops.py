"""Copy the ops of a capture trace into an execution rank's ops table, for trace.graphs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.model import RankTrace
from tracekit.trace.store import OpInputStore


def append_capture_ops(rank: RankTrace, ops: pd.DataFrame, sources: list[RankTrace],
                        wanted: dict[int, dict[int, int]]) -> tuple[pd.DataFrame, OpInputStore | None]:
    """Copy the wanted capture ops and their ancestors into `ops` (times unknown on this clock: NaN;
    step -1; origin = the capture file); fill `wanted` with their new rows. Returns ops, input store."""
    frames = [ops]
    store = rank.op_input_store
    base = len(ops)
    for s, rows_map in sorted(wanted.items()):
        src = sources[s]
        parent = src.ops[tables.OP_PARENT].to_numpy()
        keep = set(rows_map)
        frontier = list(keep)
        while frontier:
            p = parent[frontier]
            frontier = [int(x) for x in p[p >= 0] if int(x) not in keep]
            keep.update(frontier)
        rows = np.array(sorted(keep), dtype=np.int64)
        new_row = {int(r): base + k for k, r in enumerate(rows.tolist())}
        part = src.ops.iloc[rows].copy().reset_index(drop=True)
        for col in (tables.OP_TS, tables.OP_DUR, tables.OP_END):
            part[col] = np.nan
        part[tables.OP_STEP] = -1
        part[tables.OP_EXTERNAL_ID] = -1
        part[tables.OP_PARENT] = [new_row.get(int(p), -1) for p in parent[rows]]
        part[tables.OP_ORIGIN] = src.path
        if src.op_input_store is not None:
            decoded = src.op_input_store.decode_rows(rows)
            for col, values in decoded.items():
                part[col] = pd.Series(values, dtype=object)
            if store is not None:
                store = store.appended(src.op_input_store, rows)
        for r in rows_map:
            rows_map[r] = new_row[r]
        frames.append(part)
        base += len(rows)
    out = pd.concat(frames, ignore_index=True)
    return out, store


def decode_linked(ops: pd.DataFrame, store: OpInputStore | None, rows: np.ndarray) -> None:
    """Decode the input columns of op `rows` (and their ancestors) the loader left undecoded."""
    if store is None or len(store.starts) != len(ops):
        return
    parent = ops[tables.OP_PARENT].to_numpy()
    rows = np.unique(rows[rows >= 0])
    seen = np.zeros(len(ops), dtype=bool)  # each op is climbed from once: O(n) however deep the nesting
    seen[rows] = True
    while len(rows):
        rows = parent[rows]
        rows = np.unique(rows[rows >= 0])
        rows = rows[~seen[rows]]
        seen[rows] = True
    rows = np.flatnonzero(seen)
    dims = ops[tables.OP_INPUT_DIMS].to_numpy(dtype=object)
    rows = rows[[dims[r] is None for r in rows.tolist()]] if len(rows) else rows
    if not len(rows):
        return
    for col, values in store.decode_rows(rows).items():
        column = ops[col].to_numpy(dtype=object).copy()
        for r, v in zip(rows.tolist(), values, strict=True):
            column[r] = v
        ops[col] = column
