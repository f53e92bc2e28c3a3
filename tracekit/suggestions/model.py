"""The Suggestion a rule returns: what to change, the evidence, and the estimated saving with its formula."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.jsonsafe import plain, plain_row

# One evidence value: a number, a name, a flag, unknown (None), or shapes (op_args.Shapes tuples,
# kept as data and written as text in JSON: EVIDENCE_TEXT).
EvidenceValue = str | int | float | bool | tuple[Any, ...] | None
EVIDENCE_TEXT = {"shapes": format_shapes}


@dataclass(frozen=True)
class Suggestion:
    """One rule's finding.

    `saving_us` is the estimated wall time saved over the analysed window (every profiled step; on
    a multi-rank trace, per rank: the ranks' savings averaged). `saving_pct` is that saving in percent
    (0..100) of the window's span (the sum of the step spans, per rank); `basis` says so in words.
    `per_step_us` = saving_us / steps. `formula` writes the estimate out with its numbers; `evidence`
    rows (dicts with the same keys) say which kernels, ops or steps show the problem.
    """

    id: str
    title: str
    saving_us: float
    saving_pct: float
    formula: str
    snippet: str
    evidence: tuple[Mapping[str, EvidenceValue], ...]
    per_step_us: float | None = None
    basis: str = ""
    where: str = ""  # the source line or module that launched most of the evidence's kernels, when the trace tells
    # With the execution model (suggestions/whatif.py): the rule's own estimate on the traced timeline,
    # how the saving above was obtained, and the saving of this change together with those ranked above it.
    traced_saving_us: float | None = None
    whatif: str = ""
    combined_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "saving_us": plain(self.saving_us),
            "saving_pct": plain(self.saving_pct),
            "per_step_us": plain(self.per_step_us),
            "basis": self.basis,
            "traced_saving_us": plain(self.traced_saving_us),
            "whatif": self.whatif,
            "combined_saving_us": plain(self.combined_us),
            "formula": self.formula,
            "snippet": self.snippet,
            "evidence": [plain_row(row, EVIDENCE_TEXT) for row in self.evidence],
            "where": self.where,
        }
