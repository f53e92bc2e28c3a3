"""The trust gate: replay each steady step unmodified and trust the model only where it reproduces the trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.analyzers.step_plan import StepPlan
from tracekit.analyzers.windows import SCOPE_STEPS, SCOPE_TRACE
from tracekit.model.graph import ROLE_LAUNCH, ROLE_QUEUE, StepGraph, step_graphs
from tracekit.model.replay import ReplayCosts, ReplayResult, replay
from tracekit.trace.model import RankTrace

FIDELITY_LIMIT = 0.05  # median |replayed − traced| / traced over the steady steps, at most


@dataclass(frozen=True)
class Fidelity:
    """Whether the model of a rank can be trusted: the replay with the recorded durations against the trace.

    The gate's replay keeps every recorded duration and gap but gives each launch the latency the
    model explains (StepGraph.modelled_latency_us): a step whose span depends on waits the graph does
    not name misses. median_error is the median over the steps of |replayed − traced| / traced span;
    exact_error the same for the replay with every recorded offset (0 unless the graph contradicts the
    trace); unexplained_us the median per step of launch latency beyond the modelled one; reason says in
    one line why the model abstains ('' when trusted); queue_share is the share of launch-call time
    spent blocked on a full launch queue (modelled as a wait for the GPU); replays are the gate's."""

    rank: int
    steps: int
    median_error: float
    exact_error: float
    unexplained_us: float
    trusted: bool
    reason: str
    queue_share: float
    replays: tuple[ReplayResult, ...]
    notes: tuple[str, ...]


def _queue_share(graphs: tuple[StepGraph, ...]) -> float:
    total = sum(float(g.call_dur_us[np.isin(g.call_role, (ROLE_LAUNCH, ROLE_QUEUE))].sum()) for g in graphs)
    queued = sum(float(g.call_dur_us[g.call_role == ROLE_QUEUE].sum()) for g in graphs)
    return queued / total if total > 0 else 0.0


def _abstain(rank: RankTrace, reason: str, graphs: tuple[StepGraph, ...] = (),
             replays: tuple[ReplayResult, ...] = (), error: float = float("nan")) -> Fidelity:
    return Fidelity(rank=rank.rank, steps=len(replays), median_error=error, exact_error=float("nan"),
                    unexplained_us=float("nan"), trusted=False, reason=reason,
                    queue_share=_queue_share(graphs), replays=replays,
                    notes=tuple(dict.fromkeys(n for g in graphs for n in g.notes)))


def _cause(graphs: tuple[StepGraph, ...], replays: tuple[ReplayResult, ...], queue_share: float,
           unexplained_us: float, exact: float) -> str:
    """The likeliest reason the replay misses, from the worst step's graph."""
    worst = int(np.argmax([abs(r.error) for r in replays]))
    graph, result = graphs[worst], replays[worst]
    if exact <= FIDELITY_LIMIT and unexplained_us > 0:
        late = sum(int((g.gpu_latency_us > g.modelled_latency_us).sum()) for g in graphs)
        total = sum(g.n_gpu for g in graphs)
        share = f"{late / total:.0%} of the" if late / total >= 0.01 else f"{late} of {total}"
        return (f"{share} GPU activities start later than their launch explains on an idle "
                "stream (waits on other streams' events or work the trace does not link)")
    if queue_share > 0.2:
        return f"{queue_share:.0%} of launch time is queue-full blocking the model does not capture"
    early = [n for n in graph.notes if "return before" in n]
    if early:
        return early[0]
    side = "GPU" if result.gpu_end_us >= (result.cpu_end_us if not graph.gpu_side else -np.inf) else "CPU"
    direction = "late" if result.error > 0 else "early"
    return f"step {graph.step} ends {abs(result.error):.0%} {direction} on the {side} side: a dependency the trace does not name"


def gated_graphs(rank: RankTrace, plan: StepPlan) -> tuple[tuple[StepGraph, ...], Fidelity]:
    """The selected steps' graphs and their gate: with the hand-off anchors (graph.spawned_anchors)
    where the replay reproduces the trace with them, else without them when that passes the gate."""
    graphs = step_graphs(rank, plan)
    gate = fidelity(rank, plan, graphs)
    if not gate.trusted and graphs:
        plain = step_graphs(rank, plan, handoffs=False)
        plain_gate = fidelity(rank, plan, plain)
        if plain_gate.trusted:
            return plain, plain_gate
    return graphs, gate


def fidelity(rank: RankTrace, plan: StepPlan, graphs: tuple[StepGraph, ...] | None = None) -> Fidelity:
    """The trust gate of one rank over the selected steps of `plan` (`graphs` None: gated_graphs's)."""
    if not len(rank.gpu):
        return _abstain(rank, "no GPU activity: nothing to replay")
    if plan.scope not in (SCOPE_STEPS, SCOPE_TRACE):
        return _abstain(rank, "no ProfilerStep marks: the steps are inferred GPU-side windows, which the "
                              "replay does not reproduce")
    if graphs is None:
        return gated_graphs(rank, plan)[1]
    if not graphs:
        return _abstain(rank, "no steady step to replay")
    replays = tuple(replay(g, critical_path=False) for g in graphs)
    exact = float(np.median([abs(r.error) for r in replays]))
    gated = tuple(replay(g, ReplayCosts(gpu_latency_us=g.modelled_latency_us), critical_path=False) for g in graphs)
    median = float(np.median([abs(r.error) for r in gated]))
    unexplained = float(np.median([(g.gpu_latency_us - g.modelled_latency_us).sum() for g in graphs]))
    queue = _queue_share(graphs)
    if max(median, exact) > FIDELITY_LIMIT:
        reason = f"replay {max(median, exact):.0%} off: {_cause(graphs, gated, queue, unexplained, exact)}"
        gate = _abstain(rank, reason, graphs, replays, median)
        return Fidelity(rank=gate.rank, steps=gate.steps, median_error=median, exact_error=exact,
                        unexplained_us=unexplained, trusted=False, reason=reason, queue_share=queue,
                        replays=gated, notes=gate.notes)
    return Fidelity(rank=rank.rank, steps=len(replays), median_error=median, exact_error=exact,
                    unexplained_us=unexplained, trusted=True, reason="",
                    queue_share=queue, replays=gated,
                    notes=tuple(dict.fromkeys(n for g in graphs for n in g.notes)))
