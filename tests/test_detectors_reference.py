"""The pattern detectors' tables on every sample trace against a reference (tests/golden/detectors.json).

The reference is the detectors' output before they moved to integer-coded, vectorised passes
(written by that implementation, reviewed when written; the sample traces added later were written
by the same implementation, checked out at b3d9477; the fourth held-out set's by the code that
added it, fffc2a0 with the per-sample loop's decode exclusion, and the third set's recordings with garbage collections by f417940): the faster passes must find the same
chains, loops and attention patterns, with the same numbers, in the same order. The numbers
themselves are checked by the detector tests on synthetic traces (test_suggestions_*.py). After an
intended change to what the detectors find, regenerate with
`TRACEKIT_UPDATE_GOLDEN=1 python -m pytest tests/test_detectors_reference.py` and review the diff
(it then loads every sample trace). Without it, the traces test_invariants analyses are compared there,
from that analysis (tests/detector_reference.py), and this file loads only the others."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from detector_reference import GOLDEN, checked_with_invariants, detected, reference, sample_name

from tracekit.analyzers.analysis import rank_patterns
from tracekit.trace.load import load_trace

UPDATE = bool(os.environ.get("TRACEKIT_UPDATE_GOLDEN"))


def _sample_files() -> list[Path]:
    return sorted(p for p in SAMPLE_TRACES.rglob("*.trace.json.gz") if "capture_traces" not in p.parts)


def _group(name: str) -> str:
    """The sample folder a reference key belongs to ('.' for the top level): one test per folder."""
    return name.split("/", 1)[0] if "/" in name else "."


def _mine(path: Path) -> bool:
    """Loaded here: every trace when regenerating, else those test_invariants does not analyse."""
    return UPDATE or sample_name(path) not in checked_with_invariants()


GROUPS = sorted({_group(sample_name(p)) for p in _sample_files() if _mine(p)})


def _write_group(group: str, found: dict[str, object]) -> None:
    """TRACEKIT_UPDATE_GOLDEN: replace this folder's entries of the reference (the others are kept)."""
    current = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    current = {k: v for k, v in current.items() if _group(k) != group} | found
    GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True, allow_nan=False) + "\n")
    reference.cache_clear()


@pytest.mark.parametrize("group", GROUPS or ["-"])
def test_detectors_find_what_the_reference_found(group: str) -> None:
    files = [p for p in _sample_files() if _group(sample_name(p)) == group and _mine(p)]
    if not files:
        pytest.skip("no sample traces")
    found = {sample_name(p): detected((r.rank, rank_patterns(r)) for r in load_trace(p).ranks.values())
             for p in files}
    if UPDATE:
        _write_group(group, found)
    expected = {k: v for k, v in reference().items() if k in found}
    assert sorted(found) == sorted(expected)
    for name in expected:
        assert found[name] == expected[name], name


def test_the_reference_holds_every_sample_trace_and_each_kind_of_sequence() -> None:
    files = _sample_files()
    if not files:
        pytest.skip("no sample traces")
    held = json.loads(GOLDEN.read_text())
    if UPDATE:  # a trace removed from sample_traces leaves the reference too
        names = {sample_name(p) for p in files}
        held = {k: v for k, v in held.items() if k in names}
        GOLDEN.write_text(json.dumps(held, indent=1, sort_keys=True, allow_nan=False) + "\n")
    assert sorted(sample_name(p) for p in files) == sorted(held)
    # some sample traces hold each kind of sequence pattern, so the comparison is not vacuous
    kinds = {kind for doc in held.values() for rank in doc.values() for kind in ("chains", "loops", "attention")
             if rank[kind]}
    assert kinds == {"chains", "loops", "attention"}
    # and test_invariants compares every other sample trace it analyses
    assert {sample_name(p) for p in files} - {sample_name(p) for p in files if _mine(p)} <= checked_with_invariants()
