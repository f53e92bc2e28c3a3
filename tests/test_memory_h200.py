"""The memory view against the H200 measurement: benchmarks/gpu/memory_validate.py trained a small GPT-like
model (4 blocks, width 512, sequence 512, AdamW) at batch 256 under `tracekit profile --memory` and read
torch.cuda.max_memory_allocated() after each step in the same process (tests/data/memory/*.steps.json),
then searched the largest batch that trains without running out of memory
(docs/measurements/memory_validate_h200.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers.memory import ALLOCATOR, memory_view
from tracekit.analyzers.step_plan import plan_steps

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "memory" / "train_memory_b256.trace.json.gz"
STEPS = ROOT / "tests" / "data" / "memory" / "train_memory_b256.steps.json"
RESULTS = ROOT / "docs" / "measurements" / "memory_validate_h200.json"
BATCH = 256


@pytest.fixture(scope="module")
def view():
    rank = tracekit.load_trace(TRACE).rank()
    return memory_view(rank, plan_steps(rank))


def test_per_step_peak_within_2_percent_of_max_memory_allocated(view):
    measured = json.loads(STEPS.read_text())["max_memory_allocated"]
    # the script ran 6 steps; tracekit profile skipped the first (--warmup 1) and recorded 4: the
    # measured peaks of steps 2..5 (the first one has no optimizer state yet)
    assert view.source == ALLOCATOR and len(view.steps) == 4
    for step, peak in zip(view.steps, measured[1:5], strict=True):
        assert step.peak_allocated == pytest.approx(peak, rel=0.02)
    assert view.peak_allocated == pytest.approx(max(measured), rel=0.02)
    assert view.device_memory == json.loads(RESULTS.read_text())["total_memory"]  # the trace's own deviceProperties


def test_batch_estimate_against_the_largest_batch_that_fits(view):
    search = json.loads(RESULTS.read_text())["oom_search"]
    largest, oom = search["largest_fitting"], search["smallest_oom"]
    assert (largest, oom) == (1184, 1216)
    estimate = BATCH * view.batch_factor
    # by hand from the trace: floor 219,479,552 B (weights and AdamW state, the least in use), peak
    # 29,764,176,896 B, reserved at the peak 32,604,422,144 B (overhead 1.0954), device 150,109,880,320 B:
    # (150,109,880,320 / 1.0954 - 219,479,552) / (29,764,176,896 - 219,479,552) = 4.631 -> 1185.5
    assert view.floor_allocated == 219_479_552
    assert estimate == pytest.approx(1185.5, abs=0.5) and estimate == pytest.approx(largest, rel=0.02)
