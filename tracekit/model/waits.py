"""What each blocking call of a step waits for: host syncs, synchronous copies and launches blocked by a full launch queue."""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field

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
    after the awaited end, a floor from earlier work, the awaited GPU nodes (CSR lists) and, for a
    device sync, the earlier device sync of its thread whose awaited end it also awaits (`inherit`,
    -1: none): it lists only the streams with newer work, so that n syncs over m streams list
    O(n + m) nodes, not n·m."""

    waits: np.ndarray
    queue: np.ndarray
    own_us: np.ndarray
    tail_us: np.ndarray
    floor_us: np.ndarray
    wait_ptr: np.ndarray
    wait_nodes: np.ndarray
    notes: tuple[str, ...]
    inherit: np.ndarray


@dataclass
class _Sweep:
    """One thread's device syncs in time order: GPU nodes by launch time not yet launched before a
    sync (`next`), those launched but not yet started when it returned (`pending`, by start), and
    the latest node of each stream awaited so far (`best`)."""

    start: float
    stop: float
    last: int = -1
    next: int = 0
    pending: list[tuple[float, int]] = field(default_factory=list)
    best: dict[int, int] = field(default_factory=dict)


def _device_sync_nodes(sweeps: dict[int, _Sweep], call: int, thread: int, start: float, stop: float,
                       by_launch: np.ndarray, launched_sorted: np.ndarray, g_ts: np.ndarray,
                       stream: np.ndarray) -> tuple[list[int], int]:
    """(nodes, inherit) of a device sync over [start, stop] on `thread`: the latest node of each
    stream launched before it began and started before it returned (+ slack), less those an
    earlier device sync of the thread already awaits (inherit: that sync, -1 for the first)."""
    sweep = sweeps.get(thread)
    if sweep is None or start < sweep.start or stop < sweep.stop:  # first, or calls that overlap: afresh
        sweep = sweeps[thread] = _Sweep(start, stop)
    inherit, sweep.last, sweep.start, sweep.stop = sweep.last, call, start, stop
    upto = int(np.searchsorted(launched_sorted, start, side="left"))
    for j in by_launch[sweep.next:upto].tolist():
        heapq.heappush(sweep.pending, (float(g_ts[j]), j))
    sweep.next = max(sweep.next, upto)
    changed: dict[int, int] = {}
    while sweep.pending and sweep.pending[0][0] <= stop + SYNC_SLACK_US:
        j = heapq.heappop(sweep.pending)[1]
        s = int(stream[j])
        if j > sweep.best.get(s, -1):
            sweep.best[s] = changed[s] = j
    return [changed[s] for s in sorted(changed)], inherit


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
               free: np.ndarray, *, pinned: np.ndarray, d2h: np.ndarray | None = None,
               blocking: np.ndarray | None = None) -> WaitPlan:
    """The waits of a step's calls, given their roles (ROLE_*). `d2h` (bool per GPU node): bulk
    pageable device-to-host copies; the call that launched one returns when it ends (a copy into
    pageable memory is synchronous: the driver drains it through a staging buffer), so it waits for
    its own copy like a synchronous copy does. `blocking` (bool per call): kernel launches that
    returned after their kernel ended (synchronous launches, detectors/launch_blocking.py): each
    waits for its own kernels the same way."""
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
    inherit = np.full(n, -1, dtype=np.int64)
    node_end = np.full(n, -np.inf)  # the latest end of the nodes a sync awaits (its own and inherited)
    thread = context.rt_thread[calls]
    by_launch = np.argsort(launched_at, kind="stable")
    launched_sorted = launched_at[by_launch]
    sweeps: dict[int, _Sweep] = {}
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
            nodes, inherit[i] = _device_sync_nodes(sweeps, int(i), int(thread[i]), start, stop, by_launch,
                                                   launched_sorted, g_ts, stream)
            if len(first_of_stream):
                floor[i] = float(np.max(free[first_of_stream]))
        else:  # stream / event sync: the trace names no stream or event, so the awaited work is found by time
            j = _latest_end_before(order, ends_sorted, g_ts, launched_at, start, stop)
            nodes = [j] if j >= 0 else []
            inferred += 1
        lists[i] = nodes
        node_end[i] = max(float(g_end[nodes].max()) if nodes else -np.inf,
                          node_end[inherit[i]] if inherit[i] >= 0 else -np.inf)
        awaited = max(float(node_end[i]), float(floor[i]))
        waits[i] = True
        if awaited > start:
            tail[i] = max(stop - awaited, 0.0)
            own[i] = min(float(dur[i]), tail[i])
            early += int(stop + SYNC_SLACK_US < awaited)
    own_work = np.unique(launch[d2h & (launch >= 0)]).tolist() if d2h is not None and d2h.any() else []
    if blocking is not None and blocking.any():
        own_work = sorted(set(own_work) | set(np.flatnonzero(blocking & ~waits).tolist()))
    if own_work:
        for i in own_work:
            copy = by_call[np.searchsorted(launch_sorted, i):np.searchsorted(launch_sorted, i, side="right")]
            if not len(copy):
                continue
            awaited = float(g_end[copy].max())
            lists[i], waits[i] = copy.tolist(), True
            if awaited > ts[i]:
                tail[i] = max(float(end[i]) - awaited, 0.0)
                own[i] = min(float(dur[i]), tail[i])
    launches = (role == ROLE_LAUNCH) & ~waits
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
    flat = np.fromiter((j for x in lists for j in x), dtype=np.int64, count=int(ptr[-1]))
    return WaitPlan(waits=waits, queue=queue, own_us=own, tail_us=tail, floor_us=floor, wait_ptr=ptr,
                    wait_nodes=flat, notes=tuple(notes), inherit=inherit)
