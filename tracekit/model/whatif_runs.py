"""What-if transforms over runs of consecutive launches: a hand-fused op chain (fuse_runs) and torch.compile's fused kernels (compile_runs)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif import LONG_GAP_US, launching_calls, node_mask, step_costs


@dataclasses.dataclass(frozen=True)
class _Runs:
    """The runs of consecutive launching calls whose nodes are one mask's (no other launch between):
    per call, whether it heads a run or follows inside one, and each call's run length (0 outside)."""

    heads: np.ndarray
    inner: np.ndarray
    length: np.ndarray
    ident: np.ndarray  # per call, its run's 1-based id (0 outside the kept runs)


def _runs(step: StepModel, mine: np.ndarray, min_length: int = 1) -> _Runs | None:
    """The runs of the calls launching `mine` (per GPU node) of at least `min_length` calls; None
    when there is none."""
    calls = launching_calls(step, mine)
    launching = np.flatnonzero(calls | launching_calls(step, ~mine))  # every call that launches a node
    ours = calls[launching]
    if not ours.any():
        return None
    first = ours & ~np.concatenate(([False], ours[:-1]))
    run = np.cumsum(first) * ours  # 1-based run id per launching call, 0 outside our runs
    size = np.bincount(run, minlength=int(run.max()) + 1)
    kept = ours & (size[run] >= min_length)
    if not kept.any():
        return None
    n = step.graph.n_calls
    heads, inner, length = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n)
    ident = np.zeros(n, dtype=np.int64)
    heads[launching[kept & first]] = True
    inner[launching[kept & ~first]] = True
    length[launching[kept]] = size[run[kept]]
    ident[launching[kept]] = run[kept]
    return _Runs(heads, inner, length, ident)


def fuse_runs(rows: np.ndarray, gpu_factor: float, launch_us: float) -> Transform:
    """Each run of consecutive launches of `rows` (bool per rank.gpu row; no other launch between them:
    an eager op chain between two GEMMs) done by one fused kernel: the run's GPU nodes × `gpu_factor`,
    its first call costs `launch_us` and the other launch calls nothing. The host gaps between them
    stay: the fused op's own Python (an autograd.Function, a compiled function's guards) is taken to
    cost what the chain's dispatch between its launches did (H200 train_llm.py pair: 2.13 ms
    predicted, 2.58 ms measured; with those gaps removed too, 8.93 ms)."""

    def apply(step: StepModel) -> ReplayCosts:
        mine = node_mask(step, rows)
        runs = _runs(step, mine)
        if runs is None:
            return step.costs
        _, dur, g_dur, _ = step_costs(step)
        dur = np.where(runs.inner, 0.0, np.where(runs.heads, launch_us, dur))
        return dataclasses.replace(step.costs, call_dur_us=dur,
                                   gpu_dur_us=np.where(mine, g_dur * gpu_factor, g_dur))

    return apply


def compile_runs(rows: np.ndarray, launch_us: float, bounded: np.ndarray | None = None) -> Transform:
    """torch.compile over the runs of consecutive launches of `rows` (bool per rank.gpu row: the
    elementwise/normalization kernels between two other launches): a run of k ≥ 2 becomes one fused
    kernel launched once by the compiled wrapper, so its first call costs `launch_us` and the others,
    with the host gaps before them (the eager ops' Python and dispatch), are gone; its GPU nodes take
    1/k of their time (memory-bound kernels fused: the chain's inputs read and its output written
    once, the k − 1 intermediates not at all; the rule's cap, suggestions/rules_kernels.py). A run
    holding a node of `bounded` (bool per rank.gpu row) takes its longest member's time instead (1/k
    of it per node): a training norm computes its statistics over its whole input before it can
    normalise, so fused with its activation it still reads its input twice and writes once (H100
    --try compile of three conv training steps realised 0.14–3.1 ms where 1/k predicted 2.1–8.4 ms). Unlike
    fuse_runs (a hand-fused op whose own Python replaces the chain's), none of the chain's host time
    stays, but for traced gaps longer than LONG_GAP_US (Python between the ops, not their dispatch, as
    cuda_graph keeps them). Runs of one kernel are left as they are."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        mine = node_mask(step, rows)
        runs = _runs(step, mine, min_length=2)
        if runs is None:
            return step.costs
        gap, dur, g_dur, _ = step_costs(step)
        linked = (g.gpu_launch >= 0) & mine
        k = np.where(linked, runs.length[np.maximum(g.gpu_launch, 0)], 0.0)
        run = np.where(linked & (k >= 2), runs.ident[np.maximum(g.gpu_launch, 0)], 0)
        held = np.zeros(int(runs.ident.max()) + 1, dtype=bool)  # runs priced at their longest member
        if bounded is not None and len(bounded):
            held[run[(run > 0) & bounded[g.gpu_row]]] = True
        held[0] = False
        longest = np.zeros(len(held))
        np.maximum.at(longest, run[run > 0], g_dur[run > 0])
        fused = np.where(held[run], longest[run], g_dur) / np.maximum(k, 1.0)
        dispatch = runs.inner & (g.call_gap_us <= LONG_GAP_US)  # a longer host gap is not the eager dispatch: it stays
        return dataclasses.replace(step.costs, call_gap_us=np.where(dispatch, 0.0, gap),
                                   call_dur_us=np.where(runs.inner, 0.0, np.where(runs.heads, launch_us, dur)),
                                   gpu_dur_us=np.where(run > 0, fused, g_dur))

    return apply
