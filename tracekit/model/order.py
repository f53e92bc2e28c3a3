"""A dependency order of a step graph's items (Kahn's algorithm, ties broken by traced time)."""

from __future__ import annotations

import heapq

import numpy as np


def replay_order(call_prev: np.ndarray, call_waits: np.ndarray, gpu_launch: np.ndarray, gpu_prev: np.ndarray,
                 wait_ptr: np.ndarray, wait_nodes: np.ndarray, call_ts: np.ndarray, call_end: np.ndarray,
                 gpu_ts: np.ndarray) -> np.ndarray:
    """Items in an order where every item follows what it depends on: call i starts (i), GPU node j
    (n_calls + j), waiting call i ends (n_calls + n_gpu + i). Among ready items the earliest traced
    time goes first, so the order is the trace's wherever the trace is consistent; items left in a
    cycle (none in a well-formed step) follow in traced order."""
    n_calls, n_gpu = len(call_prev), len(gpu_launch)
    total = 2 * n_calls + n_gpu
    succ: list[list[int]] = [[] for _ in range(total)]
    indegree = [0] * total

    def edge(src: int, dst: int) -> None:
        succ[src].append(dst)
        indegree[dst] += 1

    waits = call_waits.tolist()
    end_item = [n_calls + n_gpu + i if waits[i] else i for i in range(n_calls)]
    for i, p in enumerate(call_prev.tolist()):
        if p >= 0:
            edge(end_item[p], i)
        if waits[i]:
            edge(i, n_calls + n_gpu + i)
            for j in wait_nodes[wait_ptr[i]:wait_ptr[i + 1]].tolist():
                edge(n_calls + j, n_calls + n_gpu + i)
    for j, (launch, prev) in enumerate(zip(gpu_launch.tolist(), gpu_prev.tolist(), strict=True)):
        if launch >= 0:
            edge(launch, n_calls + j)
        if prev >= 0:
            edge(n_calls + prev, n_calls + j)
    key = np.concatenate([call_ts, gpu_ts, call_end]).tolist()
    priority = [0] * n_calls + [1] * n_gpu + [2] * n_calls
    present = [True] * (n_calls + n_gpu) + waits
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
    expected = sum(present)
    if len(out) < expected:
        done = set(out)
        rest = sorted((key[i], priority[i], i) for i in range(total) if present[i] and i not in done)
        out.extend(i for _, _, i in rest)
    return np.array(out, dtype=np.int64)
