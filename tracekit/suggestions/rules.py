"""The rule list (stable ids, in report order) and `suggest`: run every rule, rank by estimated saving."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tracekit.analyzers.analysis import Analysis
from tracekit.suggestions import rules_host, rules_kernels, rules_launch, rules_ranks
from tracekit.suggestions.model import Suggestion


class Rule(NamedTuple):
    """One rule: a stable id and a function from an `Analysis` to a Suggestion or None."""

    id: str
    check: Callable[[Analysis], Suggestion | None]


RULES: list[Rule] = [
    Rule("cuda_graphs", rules_launch.cuda_graphs),
    Rule("fuse_elementwise", rules_kernels.fuse_elementwise),
    Rule("batch_bmm", rules_launch.batch_bmm),
    Rule("batch_decode", rules_kernels.batch_decode),
    Rule("lower_precision", rules_kernels.lower_precision),
    Rule("align_dims", rules_kernels.align_dims),
    Rule("use_sdpa", rules_kernels.use_sdpa),
    Rule("avoid_sync", rules_host.avoid_sync),
    Rule("pinned_memory", rules_host.pinned_memory),
    Rule("dataloader_workers", rules_host.dataloader_workers),
    Rule("overlap_comm", rules_host.overlap_comm),
    Rule("rank_imbalance", rules_ranks.rank_imbalance),  # silent on an Analysis: reads the cross-rank view
]


def suggest(analysis: Analysis, rules: list[Rule] | None = None) -> list[Suggestion]:
    """Every rule's suggestion for `analysis` (tracekit.analyzers.analyze's result), largest
    estimated saving first (ties keep the RULES order). Savings of different rules can overlap
    (a CUDA graph and a bmm both remove the same launch gaps): they do not add up."""
    found = [s for rule in (RULES if rules is None else rules) if (s := rule.check(analysis)) is not None]
    return sorted(found, key=lambda s: -s.saving_us)
