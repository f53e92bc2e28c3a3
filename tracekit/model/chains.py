"""The replay of a step with no waiting call, vectorised: CPU chains are sums, each stream a max-plus recurrence."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tracekit.model.graph import ROLE_SYNC, StepGraph

PATH_CPU, PATH_LAUNCH, PATH_SYNC, PATH_GPU = 0, 1, 2, 3  # labels of critical-path segments


@dataclass(frozen=True, eq=False)
class Timeline:
    """Replayed times of a step's points and, per point, the point it waited for and the segment's label.
    Points: call starts [0, n), call ends [n, 2n), GPU starts [2n, 2n+g), GPU ends [2n+g, 2n+2g), origin."""

    call_start: np.ndarray
    call_end: np.ndarray
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    pred: np.ndarray | None
    label: np.ndarray | None


def _segment_starts(first: np.ndarray) -> np.ndarray:
    """For each position, the index where its segment (run started by `first`) begins."""
    return np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))


def chain_timeline(graph: StepGraph, gap: np.ndarray, dur: np.ndarray, g_dur: np.ndarray, lat: np.ndarray,
                   *, critical_path: bool) -> Timeline:
    """The replay of a graph whose calls never wait (graph.call_waits all False), same rules as replay()."""
    n_calls, n_gpu = graph.n_calls, graph.n_gpu
    origin = graph.origin_us
    step = gap + dur
    total = np.cumsum(step)
    first = graph.call_prev < 0
    begin = _segment_starts(first)
    before = np.where(begin > 0, total[np.maximum(begin - 1, 0)], 0.0)
    call_end = origin + total - before
    call_start = call_end - dur
    launch = graph.gpu_launch
    ready = np.where(launch >= 0, call_start[np.maximum(launch, 0)] + lat if n_calls else graph.gpu_pin_us,
                     graph.gpu_pin_us)
    g_gap = graph.gpu_gap_us
    # e_j = max(a_j + d_j, e_{j-1} + gap_j + d_j): with P_j the running sum of gap + d on the stream,
    # e_j - P_j is the running max of a_j + d_j - P_j, started at the stream's free time
    g_first = graph.gpu_prev < 0
    g_begin = _segment_starts(g_first)
    g_total = np.cumsum(g_gap + g_dur)
    g_before = np.where(g_begin > 0, g_total[np.maximum(g_begin - 1, 0)], 0.0)
    running = g_total - g_before
    lifted = ready + g_dur - running
    lifted = np.where(g_first, np.maximum(lifted, graph.gpu_free_us), lifted)
    bounds = [*np.flatnonzero(g_first).tolist(), n_gpu]
    best = np.empty(n_gpu)
    for lo, hi in itertools.pairwise(bounds):
        best[lo:hi] = np.maximum.accumulate(lifted[lo:hi])
    gpu_end = best + running
    gpu_start = gpu_end - g_dur
    if not critical_path:
        return Timeline(call_start, call_end, gpu_start, gpu_end, None, None)
    origin_pt = 2 * n_calls + 2 * n_gpu
    pred = np.full(origin_pt + 1, origin_pt, dtype=np.int64)
    label = np.full(origin_pt + 1, PATH_GPU, dtype=np.int64)
    calls = np.arange(n_calls)
    prev = graph.call_prev
    pred[:n_calls] = np.where(prev >= 0, n_calls + prev, origin_pt)
    label[:n_calls] = PATH_CPU
    pred[n_calls:2 * n_calls] = calls
    label[n_calls:2 * n_calls] = np.where(graph.call_role == ROLE_SYNC, PATH_SYNC, PATH_LAUNCH)
    g_prev = graph.gpu_prev
    by_stream = np.where(g_prev >= 0, gpu_end[np.maximum(g_prev, 0)] if n_gpu else 0.0, graph.gpu_free_us) + g_gap
    by_launch = ready >= by_stream
    start_pts = 2 * n_calls + np.arange(n_gpu)
    pred[start_pts] = np.where(by_launch, np.where(launch >= 0, launch, origin_pt),
                               np.where(g_prev >= 0, 2 * n_calls + n_gpu + g_prev, origin_pt))
    label[start_pts] = np.where(by_launch & (launch >= 0), PATH_LAUNCH, PATH_GPU)
    pred[start_pts + n_gpu] = start_pts
    return Timeline(call_start, call_end, gpu_start, gpu_end, pred, label)
