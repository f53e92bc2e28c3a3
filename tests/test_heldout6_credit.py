"""`tracekit diff` credits the sixth held-out set's new rules only where AFTER shows their change (compare/applied.py), on the recorded pairs."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.compare.applied import applied

HELDOUT6 = Path(__file__).resolve().parent.parent / "sample_traces" / "heldout6"


@pytest.mark.parametrize(("rule", "before", "after", "evidence"), [
    # each signal's BEFORE value read from the pair's own detector tables (tests/test_rules_*.py)
    ("merge_launches", "ho6_triton_segments", "ho6_triton_segments_one_launch", "launches in under-filled runs"),
    ("enable_gqa", "ho6_gqa_repeat", "ho6_gqa_repeat_enable_gqa", "K/V expansion copies per step 128.0 → 0.0"),
    ("last_logits", "ho6_prefill_logits", "ho6_prefill_logits_last_only", "every position's logits 1.0 → 0.0"),
    ("freeze_params", "ho6_frozen_backbone", "ho6_frozen_backbone_freeze", "no optimizer reads per step 144.0 → 0.0"),
])
def test_credited_when_the_change_shows_and_not_otherwise(rule, before, after, evidence):
    b = tracekit.analyze(tracekit.load_trace(HELDOUT6 / f"{before}.trace.json.gz"))
    a = tracekit.analyze(tracekit.load_trace(HELDOUT6 / f"{after}.trace.json.gz"))
    made = applied(rule, b, a)
    assert made.applied is True and evidence in made.evidence
    assert applied(rule, b, b).applied is False
