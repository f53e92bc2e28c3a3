"""The optional per-rank views a summary carries (memory, operators) and their JSON keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.analyzers.memory import MemoryView
from tracekit.analyzers.operators import OperatorView


@dataclass(frozen=True)
class RankViews:
    """One rank's memory view (profile_memory traces) and operator groupings (op, module, line)."""

    rank: int
    memory: MemoryView | None = None
    operators: tuple[OperatorView, ...] = ()

    def grouping(self, by: str) -> OperatorView | None:
        return next((v for v in self.operators if v.by == by), None)


def views_dict(views: Sequence[RankViews]) -> dict[str, Any]:
    """The document's "memory" and "operators" keys: one entry per rank that has one."""
    return {"memory": [v.memory.to_dict() for v in views if v.memory is not None],
            "operators": [{"rank": v.rank, "groupings": [o.to_dict() for o in v.operators]}
                          for v in views if v.operators]}
