"""The pattern detectors' reference, tests/golden/detectors.json: each sample trace's detector tables as JSON-safe records, which sample traces test_invariants compares against it (from the analysis it makes anyway), and the comparison."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

from conftest import SAMPLE_TRACES

from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.detectors import sequences
from tracekit.analyzers.detectors.patterns import Patterns
from tracekit.jsonsafe import records

GOLDEN = Path(__file__).resolve().parent / "golden" / "detectors.json"
SEQUENCES = ("chains", "loops", "attention", "masked_attention")  # compared row by row
OTHERS = ("syncs", "copies", "dataloader", "comm", "optimizer", "host_gaps")  # compared by row count
# the sample traces test_invariants analyses (every one but the bare pairs'); it compares their
# patterns with the reference, and test_detectors_reference loads only the others
INVARIANT_SAMPLES = sorted(p for p in SAMPLE_TRACES.rglob("*.json.gz") if "bare" not in p.parts)


def sample_name(path: Path) -> str:
    """A sample trace's key in the reference: its path under sample_traces/."""
    return str(path.relative_to(SAMPLE_TRACES))


@functools.cache
def checked_with_invariants() -> frozenset[str]:
    return frozenset(sample_name(p) for p in INVARIANT_SAMPLES)


@functools.cache
def reference() -> dict[str, dict[str, object]]:
    loaded: dict[str, dict[str, object]] = json.loads(GOLDEN.read_text())
    return loaded


def detected(ranks: Iterable[tuple[int, Patterns]]) -> dict[str, object]:
    """Every detector table of every rank (rank number, its patterns), JSON-safe and as the reference
    file holds it."""
    out: dict[str, object] = {}
    for number, p in ranks:
        rows = {name: records(getattr(p, name), {sequences.LP_SHAPES: format_shapes}) for name in SEQUENCES}
        counts = {f"{name}_rows": len(getattr(p, name)) for name in OTHERS}
        out[str(number)] = rows | counts | {"training": p.training, "in_optimizer": int(p.in_optimizer.sum())}
    found: dict[str, object] = json.loads(json.dumps(out, sort_keys=True, allow_nan=False))
    return found
