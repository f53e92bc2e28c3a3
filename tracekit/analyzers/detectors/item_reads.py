"""Finished results read back one item at a time: a run of at least MIN_READS small device-to-host copies on one thread with no GPU work launched between them (`for i in ...: x[i].cpu().tolist()` / `.item()`), each copy a wait for the stream, with the per-item Python between them.

The run starts at its first read's call and ends with its last read's (and the sync call right after
it, when there is one). What a read-once change removes is everything on that thread after the first
item (its copy and the sync right after it kept: one copy of the batch, MAX_BYTES each at most here)
up to the run's end: the other items' copy and sync calls and the host gaps before them, where the
per-item ops and Python run (held-out ctc_tolist, H100: 64 reads of 2–3 KB a step, 4.1 ms of an
8.3 ms traced step; batching the collapse on the GPU and copying once saved 1.84 of 6.17 ms
unprofiled).

One row per run; per rank.runtime row, whether a read-once change removes the call."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors import hostside
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_READS = 16  # fewer reads in a row are a handful of metrics, not a loop over items
MAX_BYTES = 1 << 20  # a per-item read; a bulk copy is pinned_memory's
D2H = re.compile(r"DtoH|Device\s*->\s*(Pageable|Pinned|Host)")

# --- columns of Patterns.item_reads (one row per run) ---------------------------------------------
IR_STEP = "step"
IR_READS = "reads"  # device-to-host copies in the run
IR_BYTES = "bytes"  # their summed size
IR_GONE_CALLS = "gone_calls"  # runtime calls after the first item
IR_HOST_US = "host_us"  # traced time on the thread from the first item's end to the run's end
READ_COLUMNS = (IR_STEP, IR_READS, IR_BYTES, IR_GONE_CALLS, IR_HOST_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(READ_COLUMNS))


@dataclass(frozen=True)
class ItemReads:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: removed by reading once


def find_item_reads(rank: RankTrace, steps: StepsOf) -> ItemReads:
    """READ_COLUMNS per run of per-item reads in the steps, and the calls reading once removes."""
    rt, gpu = rank.runtime, rank.gpu
    none = ItemReads(empty(), np.zeros(len(rt), dtype=bool))
    if not len(rt) or not len(gpu):
        return none
    launch = gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64)
    linked = launch >= 0
    size = gpu[tables.GPU_BYTES].to_numpy(dtype=float)
    read = linked & (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_MEMCPY) \
        & matches(gpu[tables.GPU_NAME].to_numpy(dtype=object), D2H) & (np.nan_to_num(size) <= MAX_BYTES)
    is_read = np.zeros(len(rt), dtype=bool)
    is_read[launch[read]] = True
    read_bytes = np.zeros(len(rt))
    np.add.at(read_bytes, launch[read], np.nan_to_num(size[read]))
    launches_work = np.zeros(len(rt), dtype=bool)
    launches_work[launch[linked & ~read]] = True  # a kernel, a memset or another copy between reads ends a run
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    is_sync = np.isin(kind, tables.SYNC_KINDS)
    tid = rt[tables.RT_TID].to_numpy()
    end = rt[tables.RT_END].to_numpy(dtype=float)
    step = steps.runtime
    threads = pd.factorize(pd.Series(tid, dtype=object).astype(str))[0]  # ids of mixed types in untrusted traces
    order = np.lexsort((rt[tables.RT_TS].to_numpy(dtype=float), threads))
    gone = np.zeros(len(rt), dtype=bool)
    rows: list[dict[str, object]] = []
    run: list[int] = []  # positions in `order` of the current run's reads

    def close(last_pos: int) -> None:
        if len(run) < MIN_READS:
            return
        first, last = run[0], run[-1]
        start = first + 1 + int(first + 1 < len(order) and is_sync[order[first + 1]])
        stop = last + int(last + 1 <= last_pos and is_sync[order[last + 1]])
        calls = order[start:stop + 1]
        if not len(calls):
            return
        gone[calls] = True
        rows.append({IR_STEP: int(step[order[first]]), IR_READS: len(run),
                     IR_BYTES: float(read_bytes[order[run]].sum()), IR_GONE_CALLS: len(calls),
                     IR_HOST_US: float(end[order[stop]] - end[order[start - 1]])})

    for pos, row in enumerate(order.tolist()):
        if run and (threads[row] != threads[order[run[0]]] or step[row] != step[order[run[0]]] or launches_work[row]):
            close(pos - 1)
            run = []
        if is_read[row] and step[row] >= 0:
            run.append(pos)
    if run:
        close(len(order) - 1)
    if not rows:
        return none
    return ItemReads(pd.DataFrame(rows, columns=list(READ_COLUMNS)), gone)


def find_copy_back_calls(rank: RankTrace, steps: StepsOf | None = None) -> np.ndarray:
    """Per rank.runtime row: a call (the copy, its syncs) of an op that copied GPU results to pageable
    host memory in bulk (hostside's pageable device-to-host copies of at least D2H_MIN_BYTES: `.cpu()`,
    `.numpy()` of an output); what post-processing on the GPU no longer does."""
    rt = rank.runtime
    if not len(rt):
        return np.zeros(0, dtype=bool)
    steps = steps or StepsOf.of(rank)
    copies = hostside.pageable_copies(rank.gpu, rt, steps.gpu)
    ops = set(copies.loc[copies[hostside.CP_DIRECTION] == hostside.DIR_D2H, tables.RT_OP].tolist()) - {-1}
    return np.isin(rt[tables.RT_OP].to_numpy(), list(ops))
