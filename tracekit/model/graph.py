"""The dependency graph of one step: CPU call chains with their gaps, launch → GPU activity, stream order and waits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.step_plan import StepPlan
from tracekit.analyzers.windows import SCOPE_STEPS, SCOPE_TRACE
from tracekit.model.order import replay_order
from tracekit.model.rank_tables import RankTables, rank_tables
from tracekit.model.waits import (
    ROLE_LAUNCH,
    ROLE_OTHER,
    ROLE_QUEUE,
    ROLE_SYNC,
    WaitPlan,
    plan_waits,
)
from tracekit.trace import tables
from tracekit.trace.intervals import merge_intervals
from tracekit.trace.model import RankTrace

BACK_TO_BACK_US = 2.0  # an activity that starts within this of its stream predecessor's end followed it
DEFAULT_LATENCY_US = 5.0  # launch call start → activity start on an idle stream, when a step shows none
# A call whose thread sat idle (no recorded event) from its previous call until a call on another thread
# ended, at least MIN_WAIT_GAP_US, and that starts within HANDOFF_US of that end waited for that thread:
# autograd's engine thread starting backward after the forward on the main thread (train_dataloader:
# 250 µs from the main thread's last launch to the engine's first op), the main thread resuming after it.
MIN_WAIT_GAP_US = 50.0
HANDOFF_US = 1000.0
# ... or within HANDOFF_SHARE of its idle gap, when that gap is long: a thread blocked through another's
# long run resumes after that run's last launch plus its launch-free tail (the engine's last nodes
# accumulating gradients without kernels: 1.09 ms after a 128 ms backward on the H100 ho8_graph_loop).
HANDOFF_SHARE = 0.02
# A launch on an idle GPU starts its work within tens of µs (the step's typical latency, 5–15 µs on the
# H200 samples); one that waited longer than this was queued behind earlier work.
QUEUED_US = 1000.0
QUEUED_GAP_US = 50.0  # ... and one whose stream sat idle at most this long before it followed that work


@dataclass(frozen=True, eq=False)
class StepGraph:
    """Nodes and dependencies of one step (times in the rank's table µs).

    Calls (runtime/driver API calls of the step, by thread then time) form one chain per CPU thread:
    a call starts `call_gap_us` after the previous call on its thread ends (the first one after
    `origin_us`); the gap is recorded host work holding `call_gap_events` recorded CPU events (ops,
    annotations). A waiting call (ROLE_SYNC, ROLE_QUEUE, and a launch that waits for its own copy)
    ends at max(start + `call_own_us`, awaited end + `call_tail_us`), the awaited end being the latest
    end of the GPU nodes `wait_nodes[wait_ptr[i]:wait_ptr[i + 1]]`, of those of the device sync
    `call_wait_inherit[i]` (an earlier one on its thread, which lists them) and `call_wait_floor_us`
    (work from before the step). GPU node j starts at max(its launch call's start + `gpu_latency_us`, its
    stream predecessor's end (or `gpu_free_us`, the stream's end of earlier work) + `gpu_gap_us`);
    a node with no launch call in the step (`gpu_launch` -1) starts at `gpu_pin_us`: its traced
    start, or -inf when it followed its stream predecessor back to back (it was launched steps
    earlier, the CPU running ahead: it follows the stream, so faster kernels before it move it).
    The step ends when the main thread reaches `cpu_end_us` (the tail after its last call is
    `tail_us`, holding `tail_events`) and the GPU work ends, never before `window_start_us`.
    `order` lists items in dependency order: call i starts (i), GPU node j (n_calls + j), waiting
    call i ends (n_calls + n_gpu + i)."""

    rank: int
    step: int
    window_start_us: float
    window_end_us: float
    origin_us: float
    cpu_end_us: float  # traced CPU-side end (the step mark's end); NaN when the window is GPU-side
    gpu_side: bool  # the span ends with the GPU work only (one pseudo-step over the whole trace)
    call_row: np.ndarray
    call_thread: np.ndarray
    call_prev: np.ndarray
    call_ts_us: np.ndarray
    call_dur_us: np.ndarray
    call_gap_us: np.ndarray
    call_gap_events: np.ndarray
    call_anchor: np.ndarray  # call on another thread whose end this call waited for (-1: none)
    call_anchor_gap_us: np.ndarray  # from that call's end to this call's start
    call_anchor_events: np.ndarray  # recorded events of this call's thread inside that stretch
    call_role: np.ndarray
    call_kernel: np.ndarray  # bool: a kernel launch call (not a copy, a memset or a graph launch)
    call_blocking: np.ndarray  # bool: a kernel launch that returned after its kernel (synchronous launches)
    call_waits: np.ndarray  # bool: the call's end is computed from the GPU work it awaits
    call_own_us: np.ndarray
    call_tail_us: np.ndarray
    call_wait_floor_us: np.ndarray
    wait_ptr: np.ndarray
    wait_nodes: np.ndarray
    call_wait_inherit: np.ndarray  # device sync: the earlier one of its thread whose awaited end it awaits too (-1)
    main_last_call: int  # last call of the main thread (-1: none)
    tail_us: float
    tail_events: int
    gpu_row: np.ndarray
    gpu_launch: np.ndarray
    gpu_stream: np.ndarray
    gpu_prev: np.ndarray
    gpu_free_us: np.ndarray
    gpu_ts_us: np.ndarray
    gpu_dur_us: np.ndarray
    gpu_latency_us: np.ndarray
    gpu_gap_us: np.ndarray
    gpu_stream_bound: np.ndarray
    gpu_collective: np.ndarray
    gpu_d2h_bytes: np.ndarray  # bytes of a bulk pageable device-to-host copy node, else 0 (rank_tables)
    gpu_pin_us: np.ndarray  # earliest start of a node with no launch call in the step: its traced start, or -inf
    order: np.ndarray
    traced_gpu_busy_us: float  # union of the nodes' traced intervals inside the window
    launch_latency_us: float  # the step's typical launch call start → activity start on an idle stream
    notes: tuple[str, ...]

    @property
    def n_calls(self) -> int:
        return len(self.call_row)

    @property
    def n_gpu(self) -> int:
        return len(self.gpu_row)

    @property
    def traced_span_us(self) -> float:
        return self.window_end_us - self.window_start_us

    @property
    def traced_gpu_end_us(self) -> np.ndarray:
        return self.gpu_ts_us + self.gpu_dur_us

    @property
    def traced_call_end_us(self) -> np.ndarray:
        return self.call_ts_us + self.call_dur_us

    @property
    def modelled_latency_us(self) -> np.ndarray:
        """Launch latencies as the model explains them: an activity that started on an idle stream
        later than the step's typical latency (+ BACK_TO_BACK_US) waited for something the graph does
        not name (an event on another stream, unlinked work); here it starts at the typical latency."""
        launch_bound = (self.gpu_launch >= 0) & ~self.gpu_stream_bound
        cap = self.launch_latency_us + BACK_TO_BACK_US
        return np.where(launch_bound, np.minimum(self.gpu_latency_us, cap), self.gpu_latency_us)


def busy_in(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Union length of the intervals, clipped to [lo, hi]."""
    if not len(starts) or hi <= lo:
        return 0.0
    merged_starts, merged_ends = merge_intervals(np.clip(starts, lo, hi), np.clip(ends, lo, hi))
    return float((merged_ends - merged_starts).sum())


def cross_thread_anchors(thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, prev_end: np.ndarray) -> np.ndarray:
    """Per call, the call on another thread it resumed after (-1: none): the latest call end at or
    before its start, when that end falls inside the call's idle gap and at most HANDOFF_US before it."""
    n = len(ts)
    if n == 0 or len(np.unique(thread)) < 2:
        return np.full(n, -1, dtype=np.int64)
    end = ts + dur
    by_end = np.argsort(end, kind="stable")
    k = np.searchsorted(end[by_end], ts, side="right") - 1
    cand = np.where(k >= 0, by_end[np.maximum(k, 0)], -1)
    c = np.maximum(cand, 0)
    ok = (cand >= 0) & (thread[c] != thread) & (end[c] > prev_end)
    ok &= ts - end[c] <= np.maximum(HANDOFF_US, HANDOFF_SHARE * (ts - prev_end))
    ok &= ts - prev_end >= MIN_WAIT_GAP_US
    return np.where(ok, cand, -1).astype(np.int64)


def spawned_anchors(thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, first: np.ndarray, gap: np.ndarray,
                    anchor: np.ndarray, main_key: int | None) -> np.ndarray:
    """`anchor` with each other thread's first call of the window (not yet anchored, idle at least
    MIN_WAIT_GAP_US since the window opened) anchored to the main thread's latest call ending before
    it: work the main thread hands off (autograd's backward thread, a worker fed by the loop) starts
    when the main thread gets there, so it moves with it when the main thread gets faster."""
    if main_key is None or len(np.unique(thread)) < 2:
        return anchor
    spawned = first & (thread != main_key) & (anchor < 0) & (gap >= MIN_WAIT_GAP_US)
    main = np.flatnonzero(thread == main_key)
    if not spawned.any() or not len(main):
        return anchor
    end = (ts + dur)[main]
    by_end = np.argsort(end, kind="stable")
    k = np.searchsorted(end[by_end], ts, side="right") - 1
    cand = np.where(k >= 0, main[by_end[np.maximum(k, 0)]], -1)
    return np.where(spawned & (cand >= 0), cand, anchor).astype(np.int64)


def step_graphs(rank: RankTrace, plan: StepPlan, *, handoffs: bool = True) -> tuple[StepGraph, ...]:
    """The graph of every selected step of a rank (the steady ones by default); () when the steps
    are inferred GPU-side windows (no ProfilerStep marks), which the model does not replay.
    handoffs=False leaves other threads' first calls unanchored (spawned_anchors)."""
    if plan.scope not in (SCOPE_STEPS, SCOPE_TRACE) or not len(rank.gpu):
        return ()
    context = rank_tables(rank)
    return tuple(step_graph(rank, plan, int(k), context, handoffs=handoffs) for k in np.flatnonzero(plan.selected))


def step_graph(rank: RankTrace, plan: StepPlan, step_index: int, context: RankTables | None = None, *,
               handoffs: bool = True) -> StepGraph:
    """The graph of the step at position `step_index` of `plan` (see StepGraph)."""
    context = context if context is not None else rank_tables(rank)
    windows = plan.windows
    w0, w1 = float(windows.ts[step_index]), float(windows.end[step_index])
    step = int(windows.numbers[step_index])
    runtime, gpu = rank.runtime, rank.gpu
    notes: list[str] = []
    if plan.scope == SCOPE_TRACE:
        gpu_side, origin, cpu_end = True, w0, float("nan")
        calls = np.flatnonzero(runtime[tables.RT_TS].to_numpy(dtype=float) >= w0 - 1e-3) if len(runtime) else \
            np.empty(0, dtype=np.int64)
        nodes = np.arange(len(gpu))
        main_key = None
    else:
        row = rank.steps.iloc[step_index]
        cpu0, cpu_end = float(row[tables.STEP_TS]), float(row[tables.STEP_END])
        gpu_side, origin = False, min(cpu0, w0)
        calls = np.flatnonzero(windows.rt_pos == step_index)
        nodes = np.flatnonzero(windows.gpu_pos == step_index)
        main_key = context.step_thread.get(step)
    calls = calls[np.lexsort((context.rt_ts[calls], context.rt_thread[calls]))]
    n_calls = len(calls)
    thread = context.rt_thread[calls]
    ts = context.rt_ts[calls]
    dur = context.rt_dur[calls]
    first = np.ones(n_calls, dtype=bool)
    first[1:] = thread[1:] != thread[:-1]
    prev = np.where(first, -1, np.arange(n_calls) - 1)
    prev_end = np.where(first, origin, np.concatenate([[origin], ts[:-1] + dur[:-1]]))
    gap = ts - prev_end
    if main_key is None and n_calls:
        values, counts = np.unique(thread, return_counts=True)
        main_key = int(values[np.argmax(counts)])
    anchor = cross_thread_anchors(thread, ts, dur, prev_end)
    if (anchor >= 0).any():
        idle_end = np.where(anchor >= 0, (ts + dur)[np.maximum(anchor, 0)], prev_end)
        anchor = np.where(context.events_between(thread, prev_end, idle_end) == 0, anchor, -1)
    spawned = spawned_anchors(thread, ts, dur, first, gap, anchor, main_key) if handoffs else anchor
    if (spawned != anchor).any():  # ... only where the thread recorded nothing before the hand-off
        handoff = (ts + dur)[np.maximum(spawned, 0)]
        idle = context.events_between(thread, prev_end, np.maximum(handoff, prev_end)) == 0
        anchor = np.where((spawned != anchor) & idle, spawned, anchor)
    anchored = anchor >= 0
    anchor_end = np.where(anchored, (ts + dur)[np.maximum(anchor, 0)] if n_calls else 0.0, ts)
    anchor_gap = ts - anchor_end
    anchor_events = np.where(anchored, context.events_between(thread, anchor_end, ts), 0)
    events = np.where(anchored, 0, context.events_between(thread, prev_end, ts))
    gap = np.where(anchored, 0.0, gap)  # an anchored call's own thread was ready: it waited for the other one
    if anchored.any():
        notes.append(f"{int(anchored.sum())} calls resume within {HANDOFF_US:.0f} µs of a call on another "
                     "thread ending, their own thread idle until then: modelled as waiting for that thread")
    kinds = context.rt_kind[calls]
    role = np.where(np.isin(kinds, tables.SYNC_KINDS), ROLE_SYNC,
                    np.where(np.isin(kinds, tables.LAUNCH_KINDS), ROLE_LAUNCH, ROLE_OTHER)).astype(np.int8)
    main_calls = np.flatnonzero(thread == main_key) if n_calls else np.empty(0, dtype=np.int64)
    main_last = int(main_calls[-1]) if len(main_calls) else -1
    if gpu_side:
        tail_us, tail_events = 0.0, 0
    else:
        tail_from = float(ts[main_last] + dur[main_last]) if main_last >= 0 else origin
        tail_us = cpu_end - tail_from
        tail_events = int(context.events_between(np.array([main_key if main_key is not None else -1]),
                                                 np.array([tail_from]), np.array([cpu_end]))[0])

    # GPU nodes: launch call (position among the step's calls), stream order, latency and gap
    call_pos = pd.Index(calls)
    nodes = nodes[np.lexsort((context.gpu_ts[nodes], context.gpu_stream[nodes]))]
    launch_rows = context.gpu_launch[nodes]
    launch = np.where(launch_rows >= 0, call_pos.get_indexer(launch_rows), -1) if n_calls else \
        np.full(len(nodes), -1)
    stream = context.gpu_stream[nodes]
    g_ts, g_dur = context.gpu_ts[nodes], context.gpu_dur[nodes]
    n_gpu = len(nodes)
    first_on_stream = np.ones(n_gpu, dtype=bool)
    first_on_stream[1:] = stream[1:] != stream[:-1]
    g_prev = np.where(first_on_stream, -1, np.arange(n_gpu) - 1)
    free = context.stream_free_before(nodes)
    prev_end_traced = np.where(g_prev >= 0, (g_ts + g_dur)[np.maximum(g_prev, 0)], free)
    launched_at = np.where(launch >= 0, ts[np.maximum(launch, 0)] if n_calls else 0.0, g_ts)
    waited = g_ts - launched_at
    idle_before = g_ts - prev_end_traced > BACK_TO_BACK_US
    typical = float(np.median(waited[idle_before & (launch >= 0)])) if (idle_before & (launch >= 0)).any() \
        else DEFAULT_LATENCY_US
    # queued: launched long before it ran (the CPU ahead by a step or more) and starting within
    # QUEUED_GAP_US of its stream predecessor: it followed that work across the GPU's own small gap,
    # so it moves with it (a longer idle gap is a wait the graph does not name: the gate sees it)
    queued = (launch >= 0) & (waited > QUEUED_US) & (g_ts - prev_end_traced <= QUEUED_GAP_US)
    stream_bound = ((launch >= 0) & ~idle_before & (waited > typical + BACK_TO_BACK_US)) | queued
    # a stream-bound activity's own launch latency: the step's typical one, unless queued launches
    # inflate that median past QUEUED_US (a deep queue: then DEFAULT_LATENCY_US)
    own_latency = typical if typical <= QUEUED_US else DEFAULT_LATENCY_US
    latency = np.where(stream_bound, np.minimum(own_latency, waited), waited)
    gap_after = np.where(stream_bound, g_ts - prev_end_traced, np.minimum(g_ts - prev_end_traced, 0.0))
    pin = np.where((launch < 0) & (g_ts - prev_end_traced <= BACK_TO_BACK_US), -np.inf, g_ts)
    collective = context.gpu_collective[nodes]
    if collective.any():
        notes.append(f"{int(collective.sum())} collective kernels keep their recorded durations "
                     "(they include the wait for the other ranks)")
    blocking = context.rt_blocking[calls] & (role == ROLE_LAUNCH)
    if blocking.any():
        notes.append(f"{int(blocking.sum())} kernel launch calls return after their kernel ends (synchronous "
                     "launches, CUDA_LAUNCH_BLOCKING=1): modelled as waiting for it")
    waits: WaitPlan = plan_waits(
        context, calls, ts, dur, role, launch, stream, g_ts, g_dur, g_prev, free, pinned=launch < 0,
        d2h=context.gpu_d2h_bytes[nodes] > 0, blocking=blocking)
    role = np.where(waits.queue, ROLE_QUEUE, role).astype(np.int8)
    notes.extend(waits.notes)
    if context.stream_waits:
        notes.append("cudaEventRecord → cudaStreamWaitEvent pairs are not matched (the trace records no "
                     "event handles): cross-stream waits stay in the recorded stream gaps")
    order = replay_order(prev, anchor, waits.waits, launch, g_prev, waits.wait_ptr, waits.wait_nodes,
                         ts, ts + dur, g_ts)
    return StepGraph(
        rank=rank.rank, step=step, window_start_us=w0, window_end_us=w1, origin_us=origin, cpu_end_us=cpu_end,
        gpu_side=gpu_side, call_row=calls, call_thread=thread, call_prev=prev, call_ts_us=ts, call_dur_us=dur,
        call_gap_us=gap, call_gap_events=events, call_anchor=anchor, call_anchor_gap_us=anchor_gap,
        call_anchor_events=anchor_events, call_role=role,
        call_kernel=np.asarray(kinds == tables.KIND_KERNEL, dtype=bool), call_blocking=blocking & waits.waits,
        call_waits=waits.waits, call_own_us=waits.own_us,
        call_tail_us=waits.tail_us, call_wait_floor_us=waits.floor_us, wait_ptr=waits.wait_ptr,
        wait_nodes=waits.wait_nodes, call_wait_inherit=waits.inherit, main_last_call=main_last, tail_us=float(tail_us), tail_events=tail_events,
        gpu_row=nodes, gpu_launch=launch, gpu_stream=stream, gpu_prev=g_prev, gpu_free_us=free, gpu_ts_us=g_ts,
        gpu_dur_us=g_dur, gpu_latency_us=latency, gpu_gap_us=gap_after, gpu_stream_bound=stream_bound,
        gpu_collective=collective, gpu_d2h_bytes=context.gpu_d2h_bytes[nodes], gpu_pin_us=pin, order=order, traced_gpu_busy_us=busy_in(g_ts, g_ts + g_dur, w0, w1),
        launch_latency_us=typical,
        notes=tuple(notes),
    )
