"""analyze() on the project's own sample traces (recorded on an H200); skipped where not recorded."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.analysis import analyze


def _sample(name: str):
    path = SAMPLE_TRACES / name
    if not path.exists():
        pytest.skip(f"sample_traces/{name} is not recorded in this checkout")
    return tracekit.load_trace(path)


def test_gpt2_decode_is_launch_bound():
    """20 eager GPT-2 decode steps (ProfilerStep#2..#21, one token each) after a prefill step."""
    a = analyze(_sample("gpt2_decode.trace.json.gz"), tokens_per_step=1)
    s = a.summary_dict()
    assert s["verdict"] == "launch-bound"
    lo = a.ranks[0].launch
    # ProfilerStep#1 (the prefill, 1.5x a token step) and #22 (the tail) are left out
    assert s["steps"] == 20 and s["steps_total"] == 22 and lo.steady_steps == tuple(range(2, 22))
    decode = [t for t, keep in zip(lo.step_totals, lo.selected, strict=True) if keep]
    assert all(t.verdict == "launch-bound" for t in decode)
    assert s["kernels_per_token"] == pytest.approx(sorted(t.kernels for t in decode)[len(decode) // 2], rel=0.05)
    assert s["kernels_per_token"] > 100  # 12 layers of small GEMV-shaped kernels per token
    assert s["span_us"] > 2 * s["gpu_busy_us"]  # the CPU, not the GPU, sets the pace
    assert a.other_share <= 0.02
