"""A large tensor copied to the host every step only to be reduced there: a device-to-host copy of at least MIN_BYTES followed, on the same thread, by a CPU op that selects or reduces that tensor (`topk`, `sort`, `argmax`, ...) and launches nothing, where the same op on the GPU would leave only its small result to copy.

Held-out patent_search_host_topk (H100): 16 × 2,097,152 similarity scores (134 MB) copied to pageable
memory (103–116 ms a step) and ranked with `torch.topk` on the host (94 ms); with the top-k on the GPU and
its (16, 100) result copied, the bare step fell from 208.5 to 3.5 ms. A match is the copy's top-level op
(`aten::to`, `aten::copy_`, `.cpu()`) and, among the next MAX_AFTER top-level ops of its thread, one whose
name is a reduction (REDUCERS), which issues no runtime call (it runs on the CPU) and reads a tensor of the
copied shape.

One row per match in the steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_BYTES = float(16 << 20)  # below, a copy and a host pass over it take about a millisecond
MAX_AFTER = 6  # top-level ops after the copy searched for the reduction (a .numpy(), a slice between)
REDUCERS = frozenset(f"aten::{n}" for n in (
    "topk", "sort", "argsort", "argmax", "argmin", "max", "min", "amax", "amin", "sum", "mean", "kthvalue",
    "median", "nanmedian", "quantile", "unique", "_unique2", "unique_consecutive", "nonzero", "bincount",
    "histc", "histogram", "cumsum", "searchsorted", "count_nonzero", "mode", "std", "var", "norm",
    "linalg_vector_norm"))

# --- columns of Patterns.host_reductions (one row per copy reduced on the host, in the steps) ---------
HR_STEP = "step"
HR_OP = "op"  # the host reduction's name
HR_SHAPE = "shape"  # the copied tensor's shape, "16×2097152"
HR_BYTES = "bytes"  # the copy's bytes
HR_COPY_US = "copy_us"  # the copy's GPU (DMA) time
HR_HOST_US = "host_us"  # the reduction's host time
HOST_REDUCTION_COLUMNS = (HR_STEP, HR_OP, HR_SHAPE, HR_BYTES, HR_COPY_US, HR_HOST_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(HOST_REDUCTION_COLUMNS))


def _dims(v: object) -> tuple[int, ...] | None:
    if isinstance(v, list) and 0 < len(v) <= 8 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return tuple(v)
    return None


def find_host_reductions(rank: RankTrace, steps: StepsOf, top: TopLevel, rows: np.ndarray | None = None) -> pd.DataFrame:
    """HOST_REDUCTION_COLUMNS, one row per large device-to-host copy reduced on the host (`rows`: GPU rows)."""
    gpu, ops, rt = rank.gpu, rank.ops, rank.runtime
    if not len(gpu) or not len(ops):
        return empty()
    kind = gpu[tables.GPU_KIND].to_numpy(dtype=object)
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    nbytes = gpu[tables.GPU_BYTES].to_numpy(dtype=float)
    d2h = (kind == tables.KIND_MEMCPY) & (nbytes >= MIN_BYTES) & (top.gpu_top >= 0)
    d2h &= np.fromiter(("DtoH" in str(n) for n in names), dtype=bool, count=len(names))
    if rows is not None:
        d2h &= rows
    if not d2h.any():
        return empty()
    depth0 = np.flatnonzero(top.top == np.arange(len(ops)))
    tid = ops[tables.OP_TID].to_numpy()
    ts = ops[tables.OP_TS].to_numpy(dtype=float)
    calls = np.bincount(top.rt_top[top.rt_top >= 0], minlength=len(ops)) if len(rt) else np.zeros(len(ops), dtype=np.int64)
    by_thread: dict[object, np.ndarray] = {}
    for t in np.unique(tid[depth0]).tolist():
        mine = depth0[tid[depth0] == t]
        by_thread[t] = mine[np.argsort(ts[mine], kind="stable")]
    op_names = ops[tables.OP_NAME].to_numpy(dtype=object)
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    op_dur = ops[tables.OP_DUR].to_numpy(dtype=float)
    out = []
    for g in np.flatnonzero(d2h).tolist():
        copy = int(top.gpu_top[g])
        copied = rank.input_values(np.array([copy]), tables.OP_INPUT_DIMS)[0]
        shape = _dims(copied[0]) if isinstance(copied, list) and copied else None
        order = by_thread.get(tid[copy])
        if shape is None or order is None:
            continue
        at = int(np.searchsorted(ts[order], ts[copy], side="right"))
        after = order[at:at + MAX_AFTER]
        cand = after[np.isin(op_names[after], list(REDUCERS)) & (calls[after] == 0)]
        for c, dims in zip(cand.tolist(), rank.input_values(cand, tables.OP_INPUT_DIMS), strict=True):
            if isinstance(dims, list) and any(_dims(d) == shape for d in dims):
                out.append({HR_STEP: int(steps.ops[copy]), HR_OP: str(op_names[c])[:60], HR_SHAPE: "×".join(map(str, shape)),
                            HR_BYTES: float(nbytes[g]), HR_COPY_US: float(dur[g]), HR_HOST_US: float(op_dur[c])})
                break
    return pd.DataFrame(out, columns=list(HOST_REDUCTION_COLUMNS)) if out else empty()
