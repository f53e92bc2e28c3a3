"""The pattern detectors' tables on every sample trace against a reference (tests/golden/detectors.json).

The reference is the detectors' output before they moved to integer-coded, vectorised passes
(written by that implementation, reviewed when written; the sample traces added later were written
by the same implementation, checked out at b3d9477; the fourth held-out set's by the code that
added it, fffc2a0 with the per-sample loop's decode exclusion, and the third set's recordings with garbage collections by f417940): the faster passes must find the same
chains, loops and attention patterns, with the same numbers, in the same order. The numbers
themselves are checked by the detector tests on synthetic traces (test_suggestions_*.py). After an
intended change to what the detectors find, regenerate with
`TRACEKIT_UPDATE_GOLDEN=1 python -m pytest tests/test_detectors_reference.py` and review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES

from tracekit.analyzers.analysis import rank_patterns
from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.detectors import sequences
from tracekit.jsonsafe import records
from tracekit.trace.load import load_trace

GOLDEN = Path(__file__).resolve().parent / "golden" / "detectors.json"
SEQUENCES = ("chains", "loops", "attention", "masked_attention")  # compared row by row
OTHERS = ("syncs", "copies", "dataloader", "comm", "optimizer", "host_gaps")  # compared by row count


def _sample_files() -> list[Path]:
    return sorted(p for p in SAMPLE_TRACES.rglob("*.trace.json.gz") if "capture_traces" not in p.parts)


def _detected(path: Path) -> dict[str, object]:
    """Every detector table of every rank of the trace at `path`, as JSON-safe records."""
    out: dict[str, object] = {}
    for rank in load_trace(path).ranks.values():  # the patterns as analyze finds them, without the other analyzers
        p = rank_patterns(rank)
        rows = {name: records(getattr(p, name), {sequences.LP_SHAPES: format_shapes}) for name in SEQUENCES}
        counts = {f"{name}_rows": len(getattr(p, name)) for name in OTHERS}
        out[str(rank.rank)] = rows | counts | {"training": p.training, "in_optimizer": int(p.in_optimizer.sum())}
    return out


def test_detectors_find_what_the_reference_found():
    files = _sample_files()
    if not files:
        pytest.skip("no sample traces")
    found = {str(p.relative_to(SAMPLE_TRACES)): _detected(p) for p in files}
    text = json.dumps(found, indent=1, sort_keys=True, allow_nan=False) + "\n"
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    reference = json.loads(GOLDEN.read_text())
    assert sorted(found) == sorted(reference)
    for name in reference:
        assert json.loads(json.dumps(found[name], sort_keys=True, allow_nan=False)) == reference[name], name
    # some sample traces hold each kind of sequence pattern, so the comparison is not vacuous
    kinds = {kind for doc in reference.values() for rank in doc.values() for kind in ("chains", "loops", "attention")
             if rank[kind]}
    assert kinds == {"chains", "loops", "attention"}
