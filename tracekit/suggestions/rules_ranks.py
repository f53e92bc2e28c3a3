"""Rules over the cross-rank view: one rank arrives late at the collectives and the others wait for it."""

from __future__ import annotations

from tracekit.analyzers.ranks import CrossRank
from tracekit.suggestions.common import Scope, fmt_us, suggestion
from tracekit.suggestions.model import Suggestion

# what to change, by the straggler's cause
ADVICE: dict[str | None, str] = {
    "data_loading": "load its batches in DataLoader worker processes (num_workers) or balance its data",
    "sync": "remove the host synchronisations on that rank",
    "launch": "cut its CPU launch overhead (CUDA graphs, torch.compile)",
    "cpu_work": "give it more CPU (cores, threads per rank) or less CPU work per step",
    None: "find what that rank does differently (its own report section below)",
}


def rank_imbalance(view: CrossRank) -> Suggestion | None:
    """Stragglers of a cross-rank view: the collective waiting the other ranks would get back if the
    straggler arrived on time; silent without a straggler or without compared steps."""
    stragglers = view.stragglers
    if not stragglers or not view.steps:
        return None
    n = len(view.ranks)
    steps = len(view.steps)
    scope = Scope(span_us=view.span_us / n, steps=float(steps), ranks=n)
    waiting = sum(s.others_wait_us_per_step for s in stragglers) * steps
    saving = waiting / n
    rows = [{"rank": s.rank, "late_steps_pct": s.late_steps_pct, "late_us_per_step": s.late_us_per_step,
             "others_wait_us_per_step": s.others_wait_us_per_step, "cause": s.cause or "unknown",
             "evidence": s.evidence} for s in stragglers]
    first = stragglers[0]
    advice = ADVICE.get(first.cause, ADVICE[None] if not str(first.cause).startswith("gpu:")
                        else f"give it less {str(first.cause)[4:]} work or a faster kernel")
    formula = (f"Σ over compared steps and waiting ranks of min(straggler's collective start − own start, "
               f"own collective time) = {fmt_us(waiting)} over {steps} steps and {n} ranks; "
               f"/ {n} ranks = {fmt_us(saving)} per rank")
    title = (f"Rank {first.rank} holds the job back: the other ranks wait {fmt_us(first.others_wait_us_per_step)} "
             f"per step for it at the collectives; {advice}")
    return suggestion("rank_imbalance", title, saving, scope, formula, rows)
