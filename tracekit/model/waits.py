"""What each blocking call of a step waits for: host syncs, synchronous copies and launches blocked by a full launch queue."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracekit.model.rank_tables import RankTables
from tracekit.trace import tables

# Roles of a runtime call in a step graph.
ROLE_OTHER = 0  # a runtime call that neither launches nor waits (cudaStreamIsCapturing, cudaGetDevice ...)
ROLE_LAUNCH = 1  # puts work on a stream (kernel, memcpy, memset, graph launch)
ROLE_SYNC = 2  # blocks the host until GPU work ends (tables.SYNC_KINDS)
ROLE_QUEUE = 3  # a launch that blocked because the launch queue was full

DEVICE_SYNC_RE = re.compile(r"^(cuda|hip)DeviceSynchronize$|^cuCtxSynchronize$")
SYNC_SLACK_US = 1.0  # a sync returns at most this much before the end of the work it waited for (clock jitter)
# A launch call is queue-full blocking when it takes QUEUE_FACTOR × the step's median launch call and
# at least QUEUE_EXTRA_US more, and GPU work launched before it ends while it runs: the driver's launch
# queue (about 1,024 entries on NVIDIA) was full and the call returned when an entry freed.
QUEUE_FACTOR = 4.0
QUEUE_EXTRA_US = 20.0


@dataclass(frozen=True, eq=False)
class WaitPlan:
    """Per call of the step (same positions): whether it waits, the part that does not wait, the part
    after the awaited end, a floor from earlier work, and the awaited GPU nodes (CSR lists)."""

    waits: np.ndarray
    queue: np.ndarray
    own_us: np.ndarray
    tail_us: np.ndarray
    floor_us: np.ndarray
    wait_ptr: np.ndarray
    wait_nodes: np.ndarray
    notes: tuple[str, ...]


def _latest_end_before(order: np.ndarray, ends_sorted: np.ndarray, g_ts: np.ndarray, launched_at: np.ndarray,
                       start: float, end: float) -> int:
    """The GPU node launched before `start` whose end is the latest at or before `end` (+ slack); -1 if none."""
    k = int(np.searchsorted(ends_sorted, end + SYNC_SLACK_US, side="right")) - 1
    while k >= 0:
        j = int(order[k])
        if launched_at[j] < start and g_ts[j] <= end + SYNC_SLACK_US:
            return j
        k -= 1
        if ends_sorted[k + 1] <= start:
            break
    return -1


def plan_waits(context: RankTables, calls: np.ndarray, ts: np.ndarray, dur: np.ndarray, role: np.ndarray,
               launch: np.ndarray, stream: np.ndarray, g_ts: np.ndarray, g_dur: np.ndarray, g_prev: np.ndarray,
               free: np.ndarray, *, pinned: np.ndarray) -> WaitPlan:
    """The waits of a step's calls, given their roles (ROLE_*)."""
    n = len(calls)
    end = ts + dur
    g_end = g_ts + g_dur
    launched_at = np.where(pinned, g_ts, ts[np.maximum(launch, 0)] if n else g_ts)
    order = np.argsort(g_end, kind="stable")
    ends_sorted = g_end[order]
    waits = np.zeros(n, dtype=bool)
    queue = np.zeros(n, dtype=bool)
    own = dur.copy()
    tail = np.zeros(n)
    floor = np.full(n, -np.inf)
    lists: list[list[int]] = [[] for _ in range(n)]
    inferred = early = 0
    names = context.rt_name[calls]
    kinds = context.rt_kind[calls]
    first_of_stream = np.flatnonzero(g_prev < 0)
    by_call = np.argsort(launch, kind="stable")  # GPU nodes grouped by the call that launched them
    launch_sorted = launch[by_call]
    for i in np.flatnonzero(role == ROLE_SYNC):
        start, stop = float(ts[i]), float(end[i])
        nodes: list[int]
        own_nodes = by_call[np.searchsorted(launch_sorted, i):np.searchsorted(launch_sorted, i, side="right")]
        if kinds[i] == tables.SYNC_COPY and len(own_nodes):
            nodes = own_nodes.tolist()
        elif DEVICE_SYNC_RE.match(str(names[i])):
            eligible = np.flatnonzero((launched_at < start) & (g_ts <= stop + SYNC_SLACK_US))
            # the latest eligible node of each stream, streams in ascending order
            _, last = np.unique(stream[eligible][::-1], return_index=True)
            nodes = eligible[len(eligible) - 1 - last].tolist()
            if len(first_of_stream):
                floor[i] = float(np.max(free[first_of_stream]))
        else:  # stream / event sync: the trace names no stream or event, so the awaited work is found by time
            j = _latest_end_before(order, ends_sorted, g_ts, launched_at, start, stop)
            nodes = [j] if j >= 0 else []
            inferred += 1
        lists[i] = nodes
        awaited = max(float(g_end[nodes].max()), float(floor[i])) if nodes else float(floor[i])
        waits[i] = True
        if awaited > start:
            tail[i] = max(stop - awaited, 0.0)
            own[i] = min(float(dur[i]), tail[i])
            early += int(stop + SYNC_SLACK_US < awaited)
    launches = role == ROLE_LAUNCH
    if launches.any():
        typical = float(np.median(dur[launches]))
        long_calls = launches & (dur > max(QUEUE_FACTOR * typical, typical + QUEUE_EXTRA_US))
        for i in np.flatnonzero(long_calls):
            start, stop = float(ts[i]), float(end[i])
            j = _latest_end_before(order, ends_sorted, g_ts, launched_at, start, stop)
            if j < 0 or g_end[j] <= start + typical:
                continue
            queue[i] = waits[i] = True
            lists[i] = [j]
            tail[i] = max(stop - float(g_end[j]), 0.0)
            own[i] = min(float(dur[i]), typical)
    notes = []
    if inferred:
        notes.append(f"{inferred} stream/event syncs matched by time to the work that ended before they "
                     "returned (the trace records no stream or event handle)")
    if early:
        notes.append(f"{early} syncs return before the end of the work they are matched to")
    if queue.any():
        notes.append(f"{int(queue.sum())} launch calls blocked on a full launch queue: modelled as a wait "
                     "for the GPU work whose end released them")
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    flat = np.array([j for x in lists for j in x], dtype=np.int64)
    return WaitPlan(waits=waits, queue=queue, own_us=own, tail_us=tail, floor_us=floor, wait_ptr=ptr,
                    wait_nodes=flat, notes=tuple(notes))
