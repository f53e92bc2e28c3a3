"""benchmarks/validate_suggestions.py's labels: the pair bar, the rejected and the undecided cases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import validate_suggestions as vs


def _get(measured_ms: dict[str, float]):
    return lambda stem: {"measured": 1000 * measured_ms[stem]} if stem in measured_ms else None


def test_a_pair_below_the_bar_is_not_accepted_but_rejected():
    # bare/train_tokenize_wide -> _fixed: 36.613 -> 36.612 ms (their bare steps), a saving of
    # 0.003 % < SILENT_BELOW_PCT (2 %); bare/train_tokenize -> _fixed 39.749 -> 4.221 ms clears it
    get = _get({"bare/train_tokenize_wide": 36.613, "bare/train_tokenize_wide_fixed": 36.612,
                "bare/train_tokenize": 39.749, "bare/train_tokenize_fixed": 4.221})
    low = vs.below_bar(get)
    assert [(b, r) for b, r, _, _ in low] == [("bare/train_tokenize_wide", "preprocess_off_thread")]
    assert low[0][2] == pytest.approx(1.0) and low[0][3] == pytest.approx(36613.0)  # µs: saving, before step
    keys = {(b, r) for b, r, _, _ in low}
    accepted, rejected = vs.labels(keys), vs.rejected(keys)
    assert "preprocess_off_thread" not in accepted["bare/train_tokenize_wide"]
    assert "preprocess_off_thread" in rejected["bare/train_tokenize_wide"]
    assert "preprocess_off_thread" in accepted["bare/train_tokenize"]
    # the after trace of a pair rejects the pair's rule: the fix is made
    assert "preprocess_off_thread" in rejected["bare/train_tokenize_fixed"]


def test_measured_rejections_and_undecided_cases():
    rejected = vs.rejected()
    # TF32 on train_copies measured 13.623 -> 13.927 ms (docs/measurements/tf32_labels_h200.txt)
    assert "lower_precision" in rejected["train_copies"] and "lower_precision" not in vs.labels()["train_copies"]
    # the --try cudagraphs run of train_optimizer_fused replayed no graph: neither accepted nor rejected
    assert ("train_optimizer_fused", "cuda_graphs") in vs.UNDECIDED
    assert "cuda_graphs" not in rejected.get("train_optimizer_fused", frozenset())
