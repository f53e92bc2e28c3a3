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


def _group(name: str) -> str:
    """The sample folder a reference key belongs to ('.' for the top level): one test per folder, so
    the 460-odd traces are split into tests that the parallel run schedules early, not one long one."""
    return name.split("/", 1)[0] if "/" in name else "."


def _name(path: Path) -> str:
    return str(path.relative_to(SAMPLE_TRACES))


GROUPS = sorted({_group(_name(p)) for p in _sample_files()})


def _detected(path: Path) -> dict[str, object]:
    """Every detector table of every rank of the trace at `path`, as JSON-safe records."""
    out: dict[str, object] = {}
    for rank in load_trace(path).ranks.values():  # the patterns as analyze finds them, without the other analyzers
        p = rank_patterns(rank)
        rows = {name: records(getattr(p, name), {sequences.LP_SHAPES: format_shapes}) for name in SEQUENCES}
        counts = {f"{name}_rows": len(getattr(p, name)) for name in OTHERS}
        out[str(rank.rank)] = rows | counts | {"training": p.training, "in_optimizer": int(p.in_optimizer.sum())}
    return out


def _write_group(group: str, found: dict[str, object]) -> None:
    """TRACEKIT_UPDATE_GOLDEN: replace this folder's entries of the reference (the others are kept)."""
    reference = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    reference = {k: v for k, v in reference.items() if _group(k) != group} | found
    GOLDEN.write_text(json.dumps(reference, indent=1, sort_keys=True, allow_nan=False) + "\n")


@pytest.mark.parametrize("group", GROUPS or ["-"])
def test_detectors_find_what_the_reference_found(group: str) -> None:
    files = [p for p in _sample_files() if _group(_name(p)) == group]
    if not files:
        pytest.skip("no sample traces")
    found = {_name(p): _detected(p) for p in files}
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN"):
        _write_group(group, json.loads(json.dumps(found, sort_keys=True, allow_nan=False)))
    reference = {k: v for k, v in json.loads(GOLDEN.read_text()).items() if _group(k) == group}
    assert sorted(found) == sorted(reference)
    for name in reference:
        assert json.loads(json.dumps(found[name], sort_keys=True, allow_nan=False)) == reference[name], name


def test_the_reference_holds_every_sample_trace_and_each_kind_of_sequence() -> None:
    files = _sample_files()
    if not files:
        pytest.skip("no sample traces")
    reference = json.loads(GOLDEN.read_text())
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN"):  # a trace removed from sample_traces leaves the reference too
        names = {_name(p) for p in files}
        reference = {k: v for k, v in reference.items() if k in names}
        GOLDEN.write_text(json.dumps(reference, indent=1, sort_keys=True, allow_nan=False) + "\n")
    assert sorted(_name(p) for p in files) == sorted(reference)
    # some sample traces hold each kind of sequence pattern, so the comparison is not vacuous
    kinds = {kind for doc in reference.values() for rank in doc.values() for kind in ("chains", "loops", "attention")
             if rank[kind]}
    assert kinds == {"chains", "loops", "attention"}
