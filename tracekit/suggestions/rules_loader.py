"""Rule about a multi-process DataLoader iterator created every step (its workers forked and joined per batch)."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import loader_respawn as lr
from tracekit.model.outlook import Transform
from tracekit.model.whatif import shorter_longest_gap
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import evidence_number, rank_evidence

RESPAWN_STEP_SHARE = 0.75  # a new iterator in at least this share of a rank's steady steps: per step, not per epoch
STARTUP_MIN_US = 1000.0  # unrecorded start-up from the seed op to the first __next__: workers forked (≥ 1 ms)


def reuse_dataloader(analysis: Analysis) -> Suggestion | None:
    """A multi-process DataLoader iterator created in (nearly) every steady step: its workers' start-up,
    the wait for its first batch and its shutdown, all with the training thread recording nothing,
    are what a persistent prefetching iterator removes (its batch is ready when asked for)."""
    scope = Scope.of(analysis)
    rows, total, idle = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "loader_respawn"):
        t = table[in_headline(r, table[lr.LR_STEP].to_numpy())]
        t = t[t[lr.LR_STARTUP_US].astype(float) >= STARTUP_MIN_US]
        if not len(t) or t[lr.LR_STEP].nunique() < RESPAWN_STEP_SHARE * max(len(r.launch.steady_steps), 1):
            continue  # an epoch's new iterator, not one per step
        for row in t.to_dict("records"):
            removed = float(row[lr.LR_STARTUP_US] + row[lr.LR_WAIT_US] + row[lr.LR_SHUTDOWN_US])
            total += removed
            idle += float(row[lr.LR_GPU_IDLE_US])
            rows.append({"rank": r.rank, "step": int(row[lr.LR_STEP]), "next_calls": int(row[lr.LR_CALLS]),
                         "startup_us": float(row[lr.LR_STARTUP_US]), "wait_us": float(row[lr.LR_WAIT_US]),
                         "shutdown_us": float(row[lr.LR_SHUTDOWN_US]), "gpu_idle_us": float(row[lr.LR_GPU_IDLE_US]),
                         "saving_us": removed})
    if not rows:
        return None
    saving = total / scope.ranks
    per_step = saving / scope.steps
    formula = ("Σ per step of the new iterator's worker start-up (unrecorded time from its seed op to its first "
               "__next__), its __next__ wait and its shutdown (unrecorded time after its last __next__) = "
               f"{fmt_us(saving)} ({fmt_us(idle / scope.ranks)} of it with the GPU idle): a persistent iterator "
               "forks its workers once and has the batch prefetched when it is asked for")
    title = (f"Create the DataLoader once and keep iterating it (persistent_workers=True): a new multi-process "
             f"iterator every step forks and joins its workers, {fmt_us(per_step)} per step")
    return suggestion("reuse_dataloader", title, saving, scope, formula, rows)


def reuse_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The main thread's longest host gap (the one holding the new iterator) shorter by this rank's
    start-up + wait + shutdown per step (the rule's evidence), shrunk as the projection shrank the gap."""
    rows = rank_evidence(s, r)
    if not rows:
        return None
    steps = max(len({int(evidence_number(e, "step")) for e in rows}), 1)
    return shorter_longest_gap(sum(evidence_number(e, "saving_us") for e in rows) / steps)
