"""The own train_autocast pair (H100, sample_traces/bare/): fp32 decoder training against bf16 autocast,
judged on the recordings' own unprofiled steps (`tracekit.bare` in the raw JSON)."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest
from recorded import profiler_steps, raw_events, recording
from shared_analysis import analysed_file

BEFORE, AFTER = "train_autocast", "train_autocast_bf16"


def bare_ms(name: str) -> float:
    with gzip.open(recording("bare", name)) as f:
        return statistics.median(json.load(f)["tracekit"]["bare"]["step_us"].values()) / 1000


@pytest.mark.parametrize("name", [BEFORE, AFTER])
def test_projection_within_15_percent(name):
    u = analysed_file(recording("bare", name)).analysis.unprofiled
    assert u is not None and u.trusted
    assert u.step_us / 1000 == pytest.approx(bare_ms(name), rel=0.15)


def test_lower_precision_first_and_silent_after_but_overshoots():
    """lower_precision is first on the fp32 step and silent on the bf16 one; its what-if (27.8 ms) is
    +71 % of the bare saving (34.19 → 17.93 ms): it takes the bf16 step as GPU-bound, where the host
    sets it (docs/model.md, "Not covered: a host that runs a step ahead")."""
    saving = bare_ms(BEFORE) - bare_ms(AFTER)
    assert saving == pytest.approx(16.26, abs=0.01)
    first = analysed_file(recording("bare", BEFORE)).suggestions[0]
    assert first.id == "lower_precision"
    assert first.per_step_us / 1000 > 1.35 * saving
    assert "lower_precision" not in {s.id for s in analysed_file(recording("bare", AFTER)).suggestions}


def test_the_fp32_host_runs_a_step_ahead():
    """The fp32 step's CPU runs ahead of its GPU: per ProfilerStep window (CPU annotations, ≈ 22 ms),
    the median time from a kernel's launch call to the start of the window the kernel runs in (raw
    events, joined by correlation id) grows 11.4 → 19.2 → 26.5 ms over the last three windows; by the
    last, the kernels running in a window were issued more than a window earlier."""
    events = raw_events(recording("bare", BEFORE))
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    medians, last = [], 0.0
    for lo, hi in profiler_steps(events)[1:]:
        kernels = [e for e in events if e.get("cat") == "kernel" and lo <= e["ts"] < hi]
        ahead = [lo - launch_ts[k["args"]["correlation"]] for k in kernels if k["args"].get("correlation") in launch_ts]
        medians.append(statistics.median(ahead) / 1000)
        last = (hi - lo) / 1000
    assert medians == pytest.approx([11.396, 19.184, 26.475], abs=0.01)
    assert medians[-1] > last
