"""What-if transforms of a modelled step: the graph's projected costs as a change would leave them (CUDA graph, no sync, faster kernels, a fused region (runs of launches: whatif_runs.py), calls removed, per-tensor loops as multi-tensor ops, DataLoader workers, batched requests, merged compiled regions)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tracekit.model.graph import ROLE_LAUNCH, ROLE_OTHER, ROLE_SYNC
from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif_breaks import Breaks

# A CUDA graph replays its kernels back to back: 0.09 µs between 256 small GEMMs, 0.42 µs through a
# GPT-2 decode step (H200 sample traces, docs/validation.md); rounded up, as suggestions/rules_launch.py.
GRAPH_GAP_US = 0.5
# One cudaGraphLaunch per step: 9.6 µs median unprofiled-equivalent on gpt2_decode_graph (H200; its
# traced calls, less the profiler's launch excess the projection removes), rounded up.
GRAPH_LAUNCH_US = 10.0
# Host gaps longer than this are not the launch path a graph removes (data loading, Python between
# iterations): they stay (suggestions/rules_launch.py LONG_GAP_US).
LONG_GAP_US = 1000.0


def step_costs(step: StepModel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    c, g = step.costs, step.graph
    gap = c.call_gap_us if c.call_gap_us is not None else g.call_gap_us
    dur = c.call_dur_us if c.call_dur_us is not None else g.call_dur_us
    g_dur = c.gpu_dur_us if c.gpu_dur_us is not None else g.gpu_dur_us
    lat = c.gpu_latency_us if c.gpu_latency_us is not None else g.gpu_latency_us
    return gap.copy(), dur.copy(), g_dur.copy(), lat.copy()


def _nowait(step: StepModel, calls: np.ndarray) -> np.ndarray:
    """`calls` (bool per call) no longer waiting, with those an earlier transform freed (composed changes)."""
    before = step.costs.call_nowait
    return calls | before if before is not None else calls


def node_mask(step: StepModel, rows: np.ndarray) -> np.ndarray:
    """Per GPU node of the step: `rows` (bool per rank.gpu row) at its row."""
    return rows[step.graph.gpu_row] if len(rows) else np.zeros(step.graph.n_gpu, dtype=bool)


def launching_calls(step: StepModel, nodes: np.ndarray) -> np.ndarray:
    """Per call: it launches at least one of `nodes`."""
    out = np.zeros(step.graph.n_calls, dtype=bool)
    launch = step.graph.gpu_launch
    hit = nodes & (launch >= 0)
    out[launch[hit]] = True
    return out


def cuda_graph(excluded_rows: np.ndarray, breaks: Breaks | None = None, only_calls: np.ndarray | None = None) -> Transform:
    """Capture the step's launches in one CUDA graph: every launch (and other runtime) call whose
    kernels are not `excluded_rows` (bool per rank.gpu row: the optimizer, kernels already replayed
    from a graph) costs nothing and the Python between them (gaps ≤ LONG_GAP_US) goes with it; one
    graph launch of GRAPH_LAUNCH_US, after the host gap before it, opens each run of captured calls on a thread (a sync, an excluded
    launch or a break ends a run: a graph cannot hold them); the captured kernels follow their launch
    by GRAPH_GAP_US. Syncs, longer host gaps and the excluded launches stay, and so do torch.compile's
    graph `breaks` (a graph is captured per compiled region: the calls inside a break and the part
    of a gap inside one stay as they are). With `only_calls` (bool per rank.runtime row) only those
    calls are captured (mode="reduce-overhead" on compiled graphs: the calls inside them)."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        gap, dur, _, lat = step_costs(step)
        keep_nodes = node_mask(step, excluded_rows)
        kept_calls = launching_calls(step, keep_nodes)
        share, inside = breaks.cover(step) if breaks is not None else (np.zeros(g.n_calls), np.zeros(g.n_calls, dtype=bool))
        captured = np.isin(g.call_role, (ROLE_LAUNCH, ROLE_OTHER)) & ~kept_calls & ~inside
        if only_calls is not None and len(only_calls):
            captured &= only_calls[g.call_row]
        if not captured.any():
            return step.costs
        # a graph holds no host sync and no call left out of it: each run of captured calls on a
        # thread (from its first, or after a sync, an excluded launch or a break's calls) is a graph
        # of its own, replayed by one graph launch after the Python before it, which stays
        prev = g.call_prev
        heads = captured & ((prev < 0) | ~captured[np.maximum(prev, 0)])
        short = captured & ~heads & (gap <= LONG_GAP_US)
        gap = np.where(short, gap * share, gap)
        dur = np.where(captured, 0.0, dur)
        dur[heads] = GRAPH_LAUNCH_US
        nodes = (g.gpu_launch >= 0) & captured[np.maximum(g.gpu_launch, 0)] & ~keep_nodes
        lat = np.where(nodes, GRAPH_GAP_US, lat)
        return dataclasses.replace(step.costs, call_gap_us=gap, call_dur_us=dur, gpu_latency_us=lat)

    return apply


def no_syncs(kept_calls: np.ndarray | None = None) -> Transform:
    """Remove the step's host syncs: each sync call returns after its own (non-waiting) part; the
    syncs of `kept_calls` (bool per rank.runtime row: another change's, e.g. a per-tensor loop's) stay."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        sync = g.call_role == ROLE_SYNC
        if kept_calls is not None and len(kept_calls):
            sync &= ~kept_calls[g.call_row]
        if not sync.any():
            return step.costs
        _, dur, _, _ = step_costs(step)
        own = step.costs.call_own_us if step.costs.call_own_us is not None else g.call_own_us
        return dataclasses.replace(step.costs, call_dur_us=np.where(sync, own, dur), call_nowait=_nowait(step, sync))

    return apply


def foreach_runs(call_run: np.ndarray, launches: np.ndarray, tensors: np.ndarray, launch_us: float,
                 tensor_us: float, gone_rows: np.ndarray) -> Transform:
    """Each per-tensor loop one list of multi-tensor ops: the calls of run i (`call_run`, per rank.runtime
    row, -1 outside) but its first cost nothing and wait for nothing, with the host gaps between them
    (the loop's Python and dispatch); the first keeps its gap and costs `launches[i]` × `launch_us` +
    `tensors[i]` × `tensor_us` (the foreach ops' own host work). Their kernels keep their GPU time (the
    same bytes); the GPU rows `gone_rows` (the loop's `.item()` copies) take none."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        run = call_run[g.call_row] if len(call_run) else np.full(g.n_calls, -1)
        if not (run >= 0).any():
            return step.costs
        gap, dur, g_dur, _ = step_costs(step)
        mine = run >= 0
        ids, first = np.unique(run[mine], return_index=True)
        heads = np.flatnonzero(mine)[first]
        inner = mine.copy()
        inner[heads] = False
        gap = np.where(inner, 0.0, gap)
        dur = np.where(mine, 0.0, dur)
        dur[heads] = launches[ids] * launch_us + tensors[ids] * tensor_us
        gone = node_mask(step, gone_rows) & (g.gpu_launch >= 0) & mine[np.maximum(g.gpu_launch, 0)]
        return dataclasses.replace(step.costs, call_gap_us=gap, call_dur_us=dur, call_nowait=_nowait(step, mine & g.call_waits),
                                   gpu_dur_us=np.where(gone, 0.0, g_dur))

    return apply


def batch_forwards(k: float, rows: np.ndarray, roof_us: np.ndarray, whole_step: bool = True) -> Transform:
    """k forwards at batch 1 as one at batch k: the host side of the step × 1/k (as scale_step;
    `whole_step` False: only the calls that launch `rows` and the gaps before them, as scale_host) and
    each GPU node at `rows` (bool per rank.gpu row) its 1/k share of the batched kernel, max(its time
    now, `roof_us`: the kernel's roof time at k× the work, per rank.gpu row; NaN unknown: k × its
    time now, no gain)."""
    host = scale_step(1.0 / k, gpu_factor=1.0) if whole_step else scale_host(rows, 1.0 / k)

    def apply(step: StepModel) -> ReplayCosts:
        costs = host(step)
        g_dur = costs.gpu_dur_us if costs.gpu_dur_us is not None else step.graph.gpu_dur_us
        mine = node_mask(step, rows)
        roof = roof_us[step.graph.gpu_row] if len(roof_us) else np.full(step.graph.n_gpu, np.nan)
        batched = np.where(np.isnan(roof), k * g_dur, np.maximum(g_dur, np.nan_to_num(roof)))
        return dataclasses.replace(costs, gpu_dur_us=np.where(mine, batched / k, g_dur))

    return apply


def scale_nodes(rows: np.ndarray, saving_per_step_us: float) -> Transform:
    """The GPU nodes at `rows` (bool per rank.gpu row) all faster by one factor, chosen so that their
    summed time per step falls by `saving_per_step_us` (never below 0)."""

    def apply(step: StepModel) -> ReplayCosts:
        _, _, g_dur, _ = step_costs(step)
        mine = node_mask(step, rows)
        total = float(g_dur[mine].sum())
        if total <= 0 or saving_per_step_us <= 0:
            return step.costs
        factor = max(1.0 - saving_per_step_us / total, 0.0)
        return dataclasses.replace(step.costs, gpu_dur_us=np.where(mine, g_dur * factor, g_dur))

    return apply


def scale_rows(factor: np.ndarray) -> Transform:
    """Each GPU node × `factor` at its rank.gpu row (1: as it is; a one-position forward's kernels)."""

    def apply(step: StepModel) -> ReplayCosts:
        _, _, g_dur, _ = step_costs(step)
        return dataclasses.replace(step.costs, gpu_dur_us=g_dur * factor[step.graph.gpu_row])

    return apply


def _spanned(step: StepModel, calls: np.ndarray) -> np.ndarray:
    """`calls` and, on each thread, every call between its first and last one that does not wait for
    the GPU (the region's other runtime calls: a library's queries, its event records)."""
    g = step.graph
    out = calls.copy()
    for thread in np.unique(g.call_thread[calls]).tolist():
        at = np.flatnonzero(calls & (g.call_thread == thread))
        span = np.arange(at[0], at[-1] + 1)  # calls are in thread, then time order (StepGraph)
        span = span[(g.call_thread[span] == thread) & ~g.call_waits[span]]
        out[span] = True
    return out


def fuse_region(rows: np.ndarray, gpu_factor: float | np.ndarray, launches: int, launch_us: float,
                extra_calls: np.ndarray | None = None, whole_span: bool = False) -> Transform:
    """The region of `rows` (bool per rank.gpu row; e.g. the optimizer step) done by `launches` fused
    kernels: its GPU nodes × `gpu_factor` (one factor, or one per rank.gpu row), the calls that launch
    them and the host gaps between them (the Python of the per-tensor loop) gone, but for the first
    call, which keeps its gap and costs `launches` × `launch_us`. `extra_calls` (bool per rank.runtime
    row): other calls of the region that go the same way (the runtime queries its ops make);
    `whole_span`: every call of a thread between its first and last launching one does (_spanned)."""

    def apply(step: StepModel) -> ReplayCosts:
        gap, dur, g_dur, _ = step_costs(step)
        mine = node_mask(step, rows)
        factor = gpu_factor[step.graph.gpu_row] if isinstance(gpu_factor, np.ndarray) else gpu_factor
        calls = launching_calls(step, mine)
        if extra_calls is not None and len(extra_calls):
            calls = calls | extra_calls[step.graph.call_row]
        if whole_span and calls.any():
            calls = _spanned(step, calls)
        if not calls.any():
            return step.costs
        first = int(np.flatnonzero(calls)[0])
        inner = calls.copy()
        inner[first] = False
        gap = np.where(inner, 0.0, gap)
        dur = np.where(calls, 0.0, dur)
        dur[first] = launches * launch_us
        return dataclasses.replace(step.costs, call_gap_us=gap, call_dur_us=dur,
                                   gpu_dur_us=np.where(mine, g_dur * factor, g_dur))

    return apply


def remove_calls(calls: np.ndarray, floor_us: np.ndarray | None = None) -> Transform:
    """The work of `calls` (bool per rank.runtime row: ops the change no longer runs) gone: each call
    costs nothing and waits for nothing, the host gap before it (≤ LONG_GAP_US: the op's Python and
    dispatch) goes with it, and the GPU nodes it launched take no time. `floor_us` (per rank.gpu row,
    NaN none): the nodes there take at least that long (a kernel that now reads more bytes)."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        mine = calls[g.call_row] if len(calls) else np.zeros(g.n_calls, dtype=bool)
        floor = floor_us[g.gpu_row] if floor_us is not None and len(floor_us) else np.full(g.n_gpu, np.nan)
        if not mine.any() and np.isnan(floor).all():
            return step.costs
        gap, dur, g_dur, _ = step_costs(step)
        gone = (g.gpu_launch >= 0) & mine[np.maximum(g.gpu_launch, 0)]
        g_dur = np.where(gone, 0.0, np.where(np.isnan(floor), g_dur, np.maximum(g_dur, np.nan_to_num(floor))))
        return dataclasses.replace(step.costs, call_gap_us=np.where(mine & (g.call_gap_us <= LONG_GAP_US), 0.0, gap),
                                   call_dur_us=np.where(mine, 0.0, dur), gpu_dur_us=g_dur,
                                   call_nowait=_nowait(step, mine & g.call_waits))

    return apply


def scale_host(rows: np.ndarray, factor: float) -> Transform:
    """The host work that launches `rows` (bool per rank.gpu row) × `factor`: those calls' durations and
    the gaps before them (k× fewer tensors for a per-tensor loop to walk); their kernels as they are."""

    def apply(step: StepModel) -> ReplayCosts:
        gap, dur, _, _ = step_costs(step)
        calls = launching_calls(step, node_mask(step, rows))
        return dataclasses.replace(step.costs, call_gap_us=np.where(calls, gap * factor, gap),
                                   call_dur_us=np.where(calls, dur * factor, dur))

    return apply


def unblock_copies(rows: np.ndarray, factor: float, call_us: float, sync_rows: np.ndarray | None = None) -> Transform:
    """Copies from pinned memory: the copy nodes at `rows` × `factor` of their traced duration (the
    pinned bandwidth's time; never longer than the projection left them),
    and the calls that issued them return after `call_us` instead of blocking for the copy (a
    pageable cudaMemcpyAsync is synchronous: its recorded call holds the copy); the sync calls at
    `sync_rows` (bool per rank.runtime row: the pageable copy's own stream syncs) return after their
    own part (a non_blocking copy from pinned memory issues none)."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        _, dur, g_dur, _ = step_costs(step)
        mine = node_mask(step, rows)
        calls = launching_calls(step, mine)
        waiting = calls & g.call_waits
        dur = np.where(calls, np.minimum(dur, call_us), dur)
        if sync_rows is not None and len(sync_rows):
            sync = (g.call_role == ROLE_SYNC) & sync_rows[g.call_row]
            own = step.costs.call_own_us if step.costs.call_own_us is not None else g.call_own_us
            dur, waiting = np.where(sync, own, dur), waiting | sync
        pinned = np.minimum(g_dur, g.gpu_dur_us * factor)
        return dataclasses.replace(step.costs, gpu_dur_us=np.where(mine, pinned, g_dur),
                                   call_dur_us=dur, call_nowait=_nowait(step, waiting))

    return apply


def shorter_longest_gap(traced_us: float, tail: bool = False) -> Transform:
    """The main thread's longest host gap (the DataLoader fetching the next batch in the step) shorter
    by `traced_us` of traced time, shrunk as the projection shrank that gap (never below 0); what the
    longest gap cannot hold comes off the next longest, and so on (a step that fetches or preprocesses
    several batches waits in several gaps). With `tail`, the step's tail after the main thread's last
    call is one of those gaps (host work at the end of the step on outputs copied back: a metric in numpy)."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        gap, _, _, _ = step_costs(step)
        main = g.call_thread == (g.call_thread[g.main_last_call] if g.main_last_call >= 0 else -1)
        if not main.any() or traced_us <= 0:
            return step.costs
        rows = np.flatnonzero(main)
        last = float(step.costs.tail_us if step.costs.tail_us is not None else g.tail_us)
        traced_of = np.append(g.call_gap_us[rows], g.tail_us if tail else 0.0)  # the last entry: the tail
        now = np.append(gap[rows], last if tail else 0.0)
        left = traced_us
        for j in np.argsort(-traced_of, kind="stable").tolist():
            traced = float(traced_of[j])
            ratio = now[j] / traced if traced > 0 else 1.0  # what the projection left of it
            take = left if traced <= 0 else min(left, traced)
            now[j] = max(now[j] - take * ratio, 0.0)
            left -= take
            if left <= 0 or traced <= 0:
                break
        gap[rows] = now[:-1]
        if not tail:
            return dataclasses.replace(step.costs, call_gap_us=gap)
        return dataclasses.replace(step.costs, call_gap_us=gap, tail_us=float(now[-1]))

    return apply


def scale_step(factor: float, gpu_factor: float | None = None) -> Transform:
    """Everything in the step × `factor`: host gaps, call durations, GPU durations and the tail (the
    same work shared by 1 / factor requests: one batched forward instead of several). `gpu_factor`:
    the GPU durations × that instead (1: a step of 1 / factor × the batch, per sample)."""
    gpu = factor if gpu_factor is None else gpu_factor

    def apply(step: StepModel) -> ReplayCosts:
        gap, dur, g_dur, _ = step_costs(step)
        c, g = step.costs, step.graph
        own = c.call_own_us if c.call_own_us is not None else g.call_own_us
        anchor = c.call_anchor_gap_us if c.call_anchor_gap_us is not None else g.call_anchor_gap_us
        tail = c.tail_us if c.tail_us is not None else g.tail_us
        return dataclasses.replace(c, call_gap_us=gap * factor, call_anchor_gap_us=anchor * factor,
                                   call_dur_us=dur * factor, call_own_us=own * factor,
                                   gpu_dur_us=g_dur * gpu, tail_us=tail * factor)

    return apply


def merge_breaks(breaks: Breaks) -> Transform:
    """Graph breaks gone (the compiled regions merge): the stretches of each break (the eager code at
    the break, its sync, the guard check, the resume and the two graphs' wrapper code) are removed: the calls
    inside them cost nothing and wait for nothing, and the host gaps lose the part of them that lay
    inside them (the projected gap scaled alike)."""

    def apply(step: StepModel) -> ReplayCosts:
        share, inside = breaks.cover(step)
        if not (inside.any() or (share > 0).any()):
            return step.costs
        gap, dur, _, _ = step_costs(step)
        return dataclasses.replace(step.costs, call_gap_us=gap * (1.0 - share), call_dur_us=np.where(inside, 0.0, dur),
                                   call_nowait=_nowait(step, inside & step.graph.call_waits))

    return apply


def shorter_gaps(calls: np.ndarray, share: float) -> Transform:
    """The host gaps before `calls` (bool per rank.runtime row) × (1 − `share`): work spread over them goes."""

    def apply(step: StepModel) -> ReplayCosts:
        mine = calls[step.graph.call_row] if len(calls) else np.zeros(step.graph.n_calls, dtype=bool)
        if not mine.any() or share <= 0:
            return step.costs
        gap, _, _, _ = step_costs(step)
        return dataclasses.replace(step.costs, call_gap_us=np.where(mine, gap * (1.0 - min(share, 1.0)), gap))

    return apply


def compose(transforms: Sequence[Transform]) -> Transform:
    """The transforms applied one after the other (each sees the costs the previous one left)."""

    def apply(step: StepModel) -> ReplayCosts:
        current = step
        for t in transforms:
            current = dataclasses.replace(current, costs=t(current))
        return current.costs

    return apply
