"""Rules over the cross-rank view: one rank arrives late at the collectives and the others wait for it."""

from __future__ import annotations

from typing import Any

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
IMBALANCE_SNIPPET = '''\
# A rank that arrives late at every collective makes all the others wait.
# If its DataLoader is the cause: load in worker processes, like the other ranks.
loader = torch.utils.data.DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True,
                                     persistent_workers=True)
# If its data is bigger (uneven shards, longer sequences): balance the shards or pack the sequences.
'''


def rank_imbalance(result: Any) -> Suggestion | None:
    """Stragglers of a cross-rank view (tracekit.analyzers.ranks.CrossRank): the collective waiting
    the other ranks would get back if the straggler arrived on time; silent on a one-rank Analysis."""
    stragglers = getattr(result, "stragglers", None)
    if not stragglers or not getattr(result, "steps", None):
        return None
    n = len(result.ranks)
    steps = len(result.steps)
    scope = Scope(span_us=result.span_us / n, steps=float(steps), ranks=n)
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
    return suggestion("rank_imbalance", title, saving, scope, formula, rows, snippet=IMBALANCE_SNIPPET)
