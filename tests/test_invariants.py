"""Invariants that hold on every trace, ours and other projects': the parts of a step add up to its
span, gpu-bound only when the GPU is busy most of the window, no saving larger than the step, and an
evidence sentence that agrees with the numbers it sits beside; and on the sample traces, the pattern
detectors' tables of that same analysis equal tests/golden/detectors.json (tests/detector_reference.py);
and from the same loaded trace, the model's trust gate and kernel classification (tests/trace_checks.py):
no other test loads every sample and shared trace again."""

from __future__ import annotations

import re

import pytest
from conftest import SAMPLE_TRACES, shared_trace_files
from detector_reference import INVARIANT_SAMPLES, detected, reference, sample_name
from shared_analysis import loaded_and_analysed
from trace_checks import check_gate, check_other_share, expected_abstention

from tracekit.analyzers.totals import BUSY_SHARE, GPU_BOUND, UNDETERMINED, LaunchTotals

TRACES = INVARIANT_SAMPLES + shared_trace_files()


def _tol(t: LaunchTotals) -> float:
    return 1e-6 * max(t.span_us, 1.0) + 0.01


def check_parts(t: LaunchTotals, where: str) -> None:
    """busy + every named idle part + unexplained == span; no part below zero."""
    parts = t.parts()
    assert sum(parts.values()) == pytest.approx(t.span_us, abs=_tol(t)), where
    for name, us in parts.items():
        assert us >= -_tol(t), f"{where}: {name} = {us}"


def check_gpu_bound(t: LaunchTotals, where: str) -> None:
    if t.verdict == GPU_BOUND and t.span_us > 0:
        assert t.own_busy_us >= BUSY_SHARE * t.span_us - _tol(t), where


def check_evidence(t: LaunchTotals, where: str) -> None:
    """The sentence's first percentage is the share it names, of the span it names."""
    text = t.evidence
    if t.verdict == UNDETERMINED and t.undetermined:
        assert t.undetermined in text, where
        return
    m = re.search(r"(\d+) % of the", text)
    if m is None or t.span_us <= 0:
        return
    shown = int(m.group(1))
    if t.verdict == GPU_BOUND:
        assert shown == round(100 * t.gpu_busy_us / t.span_us), where
    elif text.startswith("The GPU computes only"):
        assert shown == round(100 * t.compute_us / t.span_us), where
    elif t.cause is not None and "+" not in t.cause:
        assert shown == round(100 * t.causes()[t.cause] / t.span_us), where


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.name))
def test_invariants(path):
    trace, result = loaded_and_analysed(path)  # the one analysis of this file the whole run shares
    check_other_share(trace)
    if "capture_traces" not in path.parts or not path.is_relative_to(SAMPLE_TRACES):
        check_gate(trace, expected_abstention(path))
    a = result.analysis
    if path in INVARIANT_SAMPLES and sample_name(path) in reference():  # the detectors' reference, from this analysis
        assert detected((r.rank, r.patterns) for r in a.ranks) == reference()[sample_name(path)], path.name
    for r in a.ranks:
        for i, t in enumerate(r.launch.step_totals):
            where = f"{path.name} rank {r.rank} step position {i}"
            check_parts(t, where)
            check_gpu_bound(t, where)
            check_evidence(t, where)
        check_parts(r.launch.totals, f"{path.name} rank {r.rank} steady totals")
    head = a.headline
    for t, where in ((a.totals, "traced headline"), (head, "headline")):
        check_parts(t, f"{path.name} {where}")
        check_gpu_bound(t, f"{path.name} {where}")
        check_evidence(t, f"{path.name} {where}")
    steps = max(head.steps, 1)
    step_us = max(head.span_us, a.totals.span_us) / steps * max(len(a.ranks), 1)
    for s in result.suggestions:
        assert 0.0 <= s.saving_pct <= 100.0 + 1e-6, f"{path.name} {s.id}: {s.saving_pct}"
        if s.per_step_us is not None:
            assert s.per_step_us <= step_us * (1 + 1e-6) + 0.01, f"{path.name} {s.id}: {s.per_step_us} > {step_us}"
