"""A dependency order of a step graph's items (Kahn's algorithm, ties broken by traced time)."""

from __future__ import annotations

import heapq

import numpy as np


def replay_order(call_prev: np.ndarray, call_anchor: np.ndarray, call_waits: np.ndarray, gpu_launch: np.ndarray, gpu_prev: np.ndarray,
                 wait_ptr: np.ndarray, wait_nodes: np.ndarray, call_ts: np.ndarray, call_end: np.ndarray,
                 gpu_ts: np.ndarray) -> np.ndarray:
    """Items in an order where every item follows what it depends on: call i starts (i), GPU node j
    (n_calls + j), waiting call i ends (n_calls + n_gpu + i). Among ready items the earliest traced
    time goes first, so the order is the trace's wherever the trace is consistent; items left in a
    cycle (none in a well-formed step) follow in traced order."""
    n_calls, n_gpu = len(call_prev), len(gpu_launch)
    src, dst = _edges(call_prev, call_anchor, call_waits, gpu_launch, gpu_prev, wait_ptr, wait_nodes)
    key = np.concatenate([call_ts, gpu_ts, call_end])
    priority = np.concatenate([np.zeros(n_calls), np.ones(n_gpu), np.full(n_calls, 2.0)])
    present = np.concatenate([np.ones(n_calls + n_gpu, dtype=bool), call_waits.astype(bool)])
    items = np.flatnonzero(present)
    by_time = items[np.lexsort((items, priority[items], key[items]))]
    position = np.full(len(key), -1, dtype=np.int64)
    position[by_time] = np.arange(len(by_time))
    if not len(src) or (position[src] < position[dst]).all():
        return by_time  # the trace's own order respects every dependency (the usual case)
    return _kahn(len(key), src, dst, key, priority, present)


def _edges(call_prev: np.ndarray, call_anchor: np.ndarray, call_waits: np.ndarray, gpu_launch: np.ndarray, gpu_prev: np.ndarray,
           wait_ptr: np.ndarray, wait_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) item of every dependency."""
    n_calls, n_gpu = len(call_prev), len(gpu_launch)
    calls = np.arange(n_calls)
    end_item = np.where(call_waits, n_calls + n_gpu + calls, calls)
    chained = call_prev >= 0
    anchored = call_anchor >= 0
    waiting = np.flatnonzero(call_waits)
    counts = np.diff(wait_ptr)
    nodes = np.arange(n_gpu)
    launched, stacked = gpu_launch >= 0, gpu_prev >= 0
    src = np.concatenate([end_item[call_prev[chained]], end_item[call_anchor[anchored]], waiting, n_calls + wait_nodes,
                          gpu_launch[launched], n_calls + gpu_prev[stacked]])
    dst = np.concatenate([calls[chained], calls[anchored], n_calls + n_gpu + waiting, n_calls + n_gpu + np.repeat(calls, counts),
                          n_calls + nodes[launched], n_calls + nodes[stacked]])
    return src.astype(np.int64), dst.astype(np.int64)


def _kahn(total: int, src: np.ndarray, dst: np.ndarray, key_array: np.ndarray, priority_array: np.ndarray,
          present_array: np.ndarray) -> np.ndarray:
    """Kahn's algorithm, the earliest traced (key, priority) first among ready items."""
    succ: list[list[int]] = [[] for _ in range(total)]
    indegree = [0] * total
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        succ[a].append(b)
        indegree[b] += 1
    key, priority, present = key_array.tolist(), priority_array.tolist(), present_array.tolist()
    heap = [(key[i], priority[i], i) for i in range(total) if present[i] and indegree[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, _, item = heapq.heappop(heap)
        out.append(item)
        for nxt in succ[item]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(heap, (key[nxt], priority[nxt], nxt))
    if len(out) < sum(present):
        done = set(out)
        rest = sorted((key[i], priority[i], i) for i in range(total) if present[i] and i not in done)
        out.extend(i for _, _, i in rest)
    return np.array(out, dtype=np.int64)
