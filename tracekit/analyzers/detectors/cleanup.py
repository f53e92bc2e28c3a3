"""End-of-step cleanup: the CUDA caching allocator's cache released every step (`torch.cuda.empty_cache()`) and Python garbage collections.

`torch.cuda.empty_cache()` records no op: it shows as `cudaFree` calls outside any op (the caching
allocator frees device memory only when asked to, or to retry a failed allocation), and the next step
allocates again through `cudaMalloc` inside its ops (torch 2.11, c10/cuda/CUDACachingAllocator.cpp).
A garbage collection is recorded only by `tracekit profile` (a `tracekit::gc…` user annotation per
collection, trace/tables.py GC_NAME_RE); in any other trace a `gc.collect()` is a silence on the thread.
The silence right before a release (no op, runtime call or annotation) is what the trace has of the
Python that ran before `empty_cache()`: in the usual `gc.collect(); torch.cuda.empty_cache()` idiom,
the collection (H200, sample_traces/heldout3/ho3_empty_cache: 161.7 ms of silence, then 28 cudaFree).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import STEP_MARK, StepsOf
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace

FREE = re.compile(r"^(?:cuda|hip)Free(?:_v\d+)?$|^cuMemFree(?:_v\d+)?$")
MALLOC = re.compile(r"^(?:cuda|hip)Malloc(?:_v\d+)?$|^cuMemAlloc(?:_v\d+)?$")

# --- columns of Patterns.cleanup (one row per step with a cache release or a collection) -----------
CL_STEP = "step"
CL_FREES = "frees"  # cudaFree calls
CL_FREE_US = "free_us"  # their time
CL_RELEASES = "releases"  # bursts of cudaFree outside any op (an empty_cache() each)
CL_MALLOCS = "mallocs"  # cudaMalloc calls (the cache growing again)
CL_MALLOC_US = "malloc_us"
CL_SILENT_US = "silent_us"  # the silence on the thread right before each release, less recorded collections
CL_GC = "collections"  # recorded garbage collections (tracekit profile)
CL_GC_US = "gc_us"  # their pauses
CL_GC_EXPLICIT = "explicit"  # those the script asked for (gc.collect())
CL_GC_FULL = "full"  # generation-2 collections
CLEANUP_COLUMNS = (CL_STEP, CL_FREES, CL_FREE_US, CL_RELEASES, CL_MALLOCS, CL_MALLOC_US, CL_SILENT_US,
                   CL_GC, CL_GC_US, CL_GC_EXPLICIT, CL_GC_FULL)

# --- columns of Patterns.cleanup_spans (what removing the cleanup takes away, per thread) ---------
CS_STEP = "step"
CS_TID = "tid"
CS_TS = "ts"
CS_END = "end"
CS_WHAT = "what"  # SPAN_* below
SPAN_ALLOC = "allocator"  # a cudaFree / cudaMalloc call
SPAN_SILENT = "silent"  # the silence before a release
SPAN_GC = "gc"  # a recorded collection
SPAN_COLUMNS = (CS_STEP, CS_TID, CS_TS, CS_END, CS_WHAT)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CLEANUP_COLUMNS))


def empty_spans() -> pd.DataFrame:
    return pd.DataFrame(columns=list(SPAN_COLUMNS))


def gc_recorded(rank: RankTrace) -> bool:
    """The trace says its recorder wrote every garbage collection (tracekit profile)."""
    meta = rank.meta.tracekit
    return isinstance(meta, dict) and meta.get(tables.GC_PAUSES_KEY) == "annotations"


class _Ends:
    """Per thread, the sorted ends of its recorded events (ops, runtime calls, annotations other than
    step marks and collections): where a silence before a time on it starts."""

    def __init__(self, rank: RankTrace) -> None:
        tids, ends = [], []
        for table, t_tid, t_end in ((rank.ops, tables.OP_TID, tables.OP_END), (rank.runtime, tables.RT_TID, tables.RT_END),
                                    (rank.annotations, tables.AN_TID, tables.AN_END)):
            if not len(table):
                continue
            keep = np.ones(len(table), dtype=bool)
            if table is rank.annotations:
                names = table[tables.AN_NAME].to_numpy(dtype=object)
                keep = ~matches(names, STEP_MARK) & ~matches(names, tables.GC_NAME_RE) & ~table[tables.AN_GPU].to_numpy(dtype=bool)
            tids.append(table[t_tid].to_numpy()[keep])
            ends.append(table[t_end].to_numpy(dtype=float)[keep])
        self._by_tid: dict[object, np.ndarray] = {}
        if tids:
            tid, end = np.concatenate(tids), np.concatenate(ends)
            for t in pd.unique(tid):
                self._by_tid[t] = np.sort(end[tid == t])

    def silence_start(self, tid: object, at: float, floor: float) -> float:
        """The latest end at or before `at` on thread `tid`, never before `floor`."""
        ends = self._by_tid.get(tid)
        if ends is None:
            return floor
        k = int(np.searchsorted(ends, at + 1e-3, side="right"))
        return max(floor, float(ends[k - 1])) if k else floor


def find_cleanup(rank: RankTrace, steps: StepsOf) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per step: cache releases, allocations and collections (CLEANUP_COLUMNS); and the spans their
    removal takes away (SPAN_COLUMNS)."""
    rt, an = rank.runtime, rank.annotations
    spans: list[dict[str, object]] = []
    per: dict[int, dict[str, float]] = {}

    def row(step: int) -> dict[str, float]:
        return per.setdefault(step, {c: 0.0 for c in CLEANUP_COLUMNS[1:]})

    an_names = an[tables.AN_NAME].to_numpy(dtype=object) if len(an) else np.zeros(0, dtype=object)
    is_gc = matches(an_names, tables.GC_NAME_RE) & ~an[tables.AN_GPU].to_numpy(dtype=bool) if len(an) else an_names.astype(bool)
    gc_s = an[tables.AN_TS].to_numpy(dtype=float)[is_gc] if len(an) else np.zeros(0)
    gc_e = an[tables.AN_END].to_numpy(dtype=float)[is_gc] if len(an) else np.zeros(0)
    for i in np.flatnonzero(is_gc).tolist():
        step = int(steps.annotations[i])
        if step < 0 and len(rank.steps):
            continue
        found = tables.GC_NAME_RE.match(str(an_names[i]))
        r = row(step)
        r[CL_GC] += 1
        r[CL_GC_US] += float(an[tables.AN_END].iat[i] - an[tables.AN_TS].iat[i])
        r[CL_GC_EXPLICIT] += bool(found and found.group(1))
        r[CL_GC_FULL] += bool(found and found.group(2) == "2")
        spans.append({CS_STEP: step, CS_TID: an[tables.AN_TID].iat[i], CS_TS: float(an[tables.AN_TS].iat[i]),
                      CS_END: float(an[tables.AN_END].iat[i]), CS_WHAT: SPAN_GC})
    if len(rt):
        names = rt[tables.RT_NAME].to_numpy(dtype=object)
        free, malloc = matches(names, FREE), matches(names, MALLOC)
        ts, end = rt[tables.RT_TS].to_numpy(dtype=float), rt[tables.RT_END].to_numpy(dtype=float)
        tid, op = rt[tables.RT_TID].to_numpy(), rt[tables.RT_OP].to_numpy(dtype=np.int64)
        step_of = steps.runtime
        starts = dict(zip(rank.steps[tables.STEP_NUMBER].tolist(), rank.steps[tables.STEP_TS].tolist(), strict=True)) \
            if len(rank.steps) else {}
        codes = pd.factorize(tid)[0]
        order = np.lexsort((ts, codes))  # by thread, then time
        previous_free = np.zeros(len(rt), dtype=bool)  # the call before it on its thread is a cudaFree
        same = codes[order][1:] == codes[order][:-1]
        previous_free[order[1:]] = same & free[order][:-1]
        s_gc, e_gc = merge_intervals(gc_s, gc_e)
        recorded: _Ends | None = None  # built at the first release
        for i in np.flatnonzero(free | malloc).tolist():
            step = int(step_of[i])
            if step < 0 and len(rank.steps):
                continue
            r = row(step)
            key = (CL_FREES, CL_FREE_US) if free[i] else (CL_MALLOCS, CL_MALLOC_US)
            r[key[0]] += 1
            r[key[1]] += float(end[i] - ts[i])
            spans.append({CS_STEP: step, CS_TID: tid[i], CS_TS: float(ts[i]), CS_END: float(end[i]), CS_WHAT: SPAN_ALLOC})
            if free[i] and op[i] < 0 and not previous_free[i]:  # the first cudaFree of an empty_cache()
                r[CL_RELEASES] += 1
                recorded = recorded or _Ends(rank)
                lo = recorded.silence_start(tid[i], float(ts[i]), float(starts.get(step, -np.inf)))
                if np.isfinite(lo) and ts[i] > lo:
                    covered = float(busy_in_windows(s_gc, e_gc, np.array([lo]), np.array([float(ts[i])]))[0]) \
                        if len(s_gc) else 0.0
                    r[CL_SILENT_US] += float(ts[i] - lo) - covered
                    if covered <= 0:
                        spans.append({CS_STEP: step, CS_TID: tid[i], CS_TS: lo, CS_END: float(ts[i]),
                                      CS_WHAT: SPAN_SILENT})
    if not per:
        return empty(), empty_spans()
    table = pd.DataFrame([{CL_STEP: s, **v} for s, v in sorted(per.items())], columns=list(CLEANUP_COLUMNS))
    for c in (CL_FREES, CL_RELEASES, CL_MALLOCS, CL_GC, CL_GC_EXPLICIT, CL_GC_FULL):
        table[c] = table[c].astype(np.int64)
    return table, pd.DataFrame(spans, columns=list(SPAN_COLUMNS))
