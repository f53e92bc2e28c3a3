"""The memory view and larger_batch against the H200 multi-batch run of benchmarks/gpu/memory_batches.py.

The run (docs/measurements/memory_batches_h200.json) trained the memory_validate.py model (4 blocks,
width 512, sequence 512, AdamW, fp32) at batches 2 and 32 under torch.profiler(profile_memory=True)
(tests/data/memory/batch_b{2,32}.trace.json.gz), with torch.cuda.max_memory_allocated() of each step
read in the same process; then plain (unprofiled) steps at every power of two up to 1024, and the
largest batch that trains without running out of memory. These traces carry no ProfilerStep marks
(torch.profiler without a schedule writes none): tracekit infers the steps, so the recording's
peak is compared, not step by step.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.memory import memory_view
from tracekit.analyzers.step_plan import plan_steps
from tracekit.suggestions.rules import RULES_BY_ID

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "memory"
RESULTS = json.loads((ROOT / "docs" / "measurements" / "memory_batches_h200.json").read_text())
BATCHES = (2, 32)


def _trace(batch: int) -> Path:
    path = DATA / f"batch_b{batch}.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    return path


def _raw(path: Path) -> tuple[float, float, float, float]:
    """From the raw [memory] events of the GPU: (least allocated, most allocated, reserved at that
    moment, the device's totalGlobalMem)."""
    with gzip.open(path) as f:
        doc = json.load(f)
    mem = [e["args"] for e in doc["traceEvents"] if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    top = max(mem, key=lambda a: a["Total Allocated"])
    return (min(a["Total Allocated"] for a in mem), top["Total Allocated"], top["Total Reserved"],
            doc["deviceProperties"][0]["totalGlobalMem"])


def _run(batch: int) -> dict:
    return next(r for r in RESULTS["profiled"] if r["batch"] == batch)


@pytest.mark.parametrize("batch", BATCHES)
def test_peak_equals_max_memory_allocated(batch):
    rank = tracekit.load_trace(_trace(batch)).rank()
    view = memory_view(rank, plan_steps(rank))
    measured = _run(batch)["max_memory_allocated"]
    assert len(set(measured)) == 1  # every measured step peaked at the same bytes
    assert view.peak_allocated == pytest.approx(measured[0], rel=0.02)
    assert view.peak_allocated == measured[0]  # as measured: to the byte (463,875,072 B; 3,921,890,304 B)


@pytest.mark.parametrize("batch, expected", [(2, 1159.6), (32, 1167.2)])
def test_batch_estimate_against_the_largest_batch_that_fits(batch, expected):
    search = RESULTS["oom_search"]
    assert (search["largest_fitting"], search["smallest_oom"]) == (1184, 1200)
    path = _trace(batch)
    low, peak, reserved, device = _raw(path)
    # by hand from the raw events: the peak's bytes above the least in use grow with the batch, the
    # least in use (weights, AdamW state) not, reserved/allocated at the peak kept:
    # b2: (150,109,880,320 / (497,025,024 / 463,875,072) − 222,625,280) / (463,875,072 − 222,625,280) × 2
    by_hand = (device / (reserved / peak) - low) / (peak - low) * batch
    assert by_hand == pytest.approx(expected, abs=0.1)
    rank = tracekit.load_trace(path).rank()
    view = memory_view(rank, plan_steps(rank))
    assert view.floor_allocated == low and batch * view.batch_factor == pytest.approx(by_hand)
    assert by_hand == pytest.approx(search["largest_fitting"], rel=0.03)  # measured: −2.1 % and −1.4 %


def test_larger_batch_at_batch_2_against_the_plain_steps():
    a = analyze(tracekit.load_trace(_trace(2)))
    assert a.verdict == "launch-bound"
    s = RULES_BY_ID["larger_batch"].run(a)
    assert s is not None and s.evidence[0]["batch_multiple"] == 8  # the estimate allows ~580×: capped at 8
    plain = {r["batch"]: r["step_ms"] * 1e3 for r in RESULTS["plain"]}
    # measured without the profiler: 11.72 ms a step at batch 2, 20.13 ms at batch 16: per 2 samples
    # 20.13 / 8 = 2.52 ms, 9.20 ms less; the rule's estimate on the profiled steps: 9.76 ms (+6 %)
    measured = plain[2] - plain[16] / 8
    assert measured == pytest.approx(9200, rel=0.01)
    assert s.per_step_us == pytest.approx(measured, rel=0.10)


def test_larger_batch_silent_at_batch_32():
    # gpu-bound: twice the batch took 75.31 ms against 38.63 ms, 3 % less per sample
    a = analyze(tracekit.load_trace(_trace(32)))
    assert a.verdict == "gpu-bound" and RULES_BY_ID["larger_batch"].run(a) is None
    plain = {r["batch"]: r["step_ms"] for r in RESULTS["plain"]}
    assert 1 - plain[64] / 2 / plain[32] == pytest.approx(0.025, abs=0.01)
