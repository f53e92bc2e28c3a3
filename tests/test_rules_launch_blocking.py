"""Rule launch_blocking (CUDA_LAUNCH_BLOCKING=1: every kernel launch returns after its kernel) on synthetic traces with hand-derived numbers."""

from __future__ import annotations

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze, step_parts
from tracekit.analyzers.detectors import launch_blocking as lb
from tracekit.suggestions.rules import RULES_BY_ID

GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
STEP_US = 20 + 20 * 77  # 20 µs before the first launch, then 20 × (a 57 µs launch on average + 20 µs host gap)


def blocking_trace(tmp_path, *, uniform: bool = False, recorded: bool | None = None, gap_us: float = 0.0,
                   name: str = "blocking.json"):
    """Four steps of STEP_US (+ gap_us) µs, each (t0 = its start): at t0+20 the first of 20 launches,
    each a call of kernel + 7 µs whose kernel starts 5 µs in and ends 2 µs before the call returns
    (a blocking launch); kernels of 30 and 70 µs in turn (50 µs each with `uniform`), 1,000 µs of GPU
    work a step; 20 µs of unrecorded host time after each call. `gap_us`: more host time before the
    first launch. `recorded`: the setting tracekit profile wrote into the trace's "tracekit" object."""
    b = TraceBuilder()
    if recorded is not None:
        b.top["tracekit"] = {"debug_modes": {"cuda_launch_blocking": recorded}}
    span = STEP_US + gap_us
    for step in range(1, 5):
        t0 = (step - 1) * span
        b.annotation(f"ProfilerStep#{step}", t0, span)
        t = t0 + 20 + gap_us
        for i in range(20):
            k = 50.0 if uniform else (30.0 if i % 2 == 0 else 70.0)
            b.launch(t, k + 7, GEMM, t + 5, k)
            t += k + 7 + 20
    return b.write(tmp_path / name)


def queued_trace(tmp_path, *, call_us: float = 8.0, kernels: tuple[float, ...] = (50.0,), name: str = "queued.json",
                 recorded: bool | None = None):
    """The fixed shape: the same 20 launches a step, each call `call_us` long, 20 µs apart; its kernel
    starts 5 µs after the call or when the one before ends (+1 µs), durations `kernels` in turn."""
    b = TraceBuilder()
    if recorded is not None:
        b.top["tracekit"] = {"debug_modes": {"cuda_launch_blocking": recorded}}
    period = 20 * (call_us + 20) + 20
    gpu = 0.0
    for step in range(1, 5):
        t0 = (step - 1) * period
        b.annotation(f"ProfilerStep#{step}", t0, period)
        t = t0 + 20
        for i in range(20):
            k = kernels[i % len(kernels)]
            gpu = max(gpu + 1, t + 5)
            b.launch(t, call_us, GEMM, gpu, k)
            gpu += k
            t += call_us + 20
    return b.write(tmp_path / name)


def test_blocking_launches_fire_with_the_replayed_saving(tmp_path):
    result = analysed_file(blocking_trace(tmp_path))
    s = next(x for x in result.suggestions if x.id == "launch_blocking")
    assert result.suggestions[0].id == "launch_blocking"
    # Projection (every launch blocks: the H200 default launch profile, fast 6.3 µs, median 8.4 µs): a
    # recorded event costs 3.75 × (6.3 − 3.85) = 9.1875 µs (the ProfilerStep mark in the first gap:
    # 20 → 10.8125 µs); each launch loses 8.4 − 3 = 5.4 µs of latency (5 → 0): its kernel starts with the
    # call and the call returns 2 µs after the kernel, then 20 µs of host. Before: 10.8125 + Σ(k + 2)
    # + 19 × 20 + 20 (tail) = 10.8125 + 1040 + 380 + 20 = 1450.8125 µs.
    # After: calls of 3 µs, kernels back to back from the first (1,000 µs of GPU work) while the host
    # needs 10.8125 + 20 × 3 + 19 × 20 + 20 = 470.8 µs: the GPU's 1,000 µs. Saving 450.8125 µs a step.
    assert s.per_step_us == pytest.approx(450.8125)
    assert s.saving_pct == pytest.approx(100 * 450.8125 / 1450.8125)
    # traced estimate: per step min(Σ (call − 8.4 µs) = 20 × 48.6 = 972 µs, 1560 − 1000 = 560 µs)
    assert s.traced_saving_us == pytest.approx(4 * 560.0)  # all four steps are steady
    rows = [(e["step"], e["launches"], e["telling_launches"], e["ending_after_kernel"]) for e in s.evidence]
    assert rows == [(n, 20, 20, 20) for n in (1, 2, 3, 4)]
    assert s.evidence[0]["blocked_host_us"] == pytest.approx(972.0)
    assert "100 % of the kernel launches wait for their kernel" in s.title and "20 launches per step" in s.title
    assert 'os.environ.pop("CUDA_LAUNCH_BLOCKING", None)' in s.snippet
    a = result.analysis
    assert RULES_BY_ID["launch_blocking"].target.measure(a, step_parts.steady(a)) == pytest.approx(972.0)


def test_the_recorded_setting_names_the_cause(tmp_path):
    s = RULES_BY_ID["launch_blocking"].run(analyze(tracekit.load_trace(blocking_trace(tmp_path, recorded=True))))
    assert s is not None and "recorded CUDA_LAUNCH_BLOCKING=1" in s.formula
    s = RULES_BY_ID["launch_blocking"].run(analyze(tracekit.load_trace(blocking_trace(tmp_path, recorded=False))))
    assert s is not None and "another setting or tool" in s.formula


def test_silent_on_the_fixed_shape(tmp_path):
    # launches of 8 µs, kernels queued behind each other: no launch ends after its kernel
    a = analyze(tracekit.load_trace(queued_trace(tmp_path)))
    assert RULES_BY_ID["launch_blocking"].run(a) is None
    assert not a.ranks[0].patterns.blocking_calls.any()


def test_slow_profiled_launches_are_not_blocking(tmp_path):
    # launches of 20 µs (the profiler's cost) with kernels of 2 µs and 8–14 µs: every 8–14 µs kernel
    # (start 5 µs in) ends inside its call, but the 2 µs kernels' calls take 20 µs too, so a kernel tells
    # only from 20 µs (lb.telling_min_us): none does
    path = queued_trace(tmp_path, call_us=20.0, kernels=(2.0, 8.0, 2.0, 14.0))
    a = analyze(tracekit.load_trace(path))
    assert RULES_BY_ID["launch_blocking"].run(a) is None
    # without tiny kernels the 8 and 14 µs kernels tell, and all end inside their 20 µs call; but the calls
    # do not grow with their kernels (lb.TRACK_SHARE): still no blocking
    path = queued_trace(tmp_path, call_us=20.0, kernels=(6.0, 16.0), name="slow.json")
    assert RULES_BY_ID["launch_blocking"].run(analyze(tracekit.load_trace(path))) is None


def test_uniform_kernels_need_the_recorded_setting(tmp_path):
    # every kernel 50 µs: whether the calls grow with their kernels cannot be read (lb.TRACK_MIN_US)
    a = analyze(tracekit.load_trace(blocking_trace(tmp_path, uniform=True)))
    assert RULES_BY_ID["launch_blocking"].run(a) is None
    a = analyze(tracekit.load_trace(blocking_trace(tmp_path, uniform=True, recorded=True)))
    assert RULES_BY_ID["launch_blocking"].run(a) is not None
    # ... and the recorded setting alone, without the trace showing blocking launches, is not enough
    path = queued_trace(tmp_path, recorded=True)
    assert RULES_BY_ID["launch_blocking"].run(analyze(tracekit.load_trace(path))) is None
    assert lb.MIN_TELLING == 10 and lb.BLOCKED_SHARE == 0.9


def test_silent_below_two_percent(tmp_path):
    # 100 ms more of host time before the first launch of each step: the same 450.8 µs saving is
    # 0.44 % of a ~101.45 ms step, under SILENT_BELOW_PCT
    result = analysed_file(blocking_trace(tmp_path, gap_us=100_000.0))
    assert RULES_BY_ID["launch_blocking"].run(result.analysis) is not None
    assert "launch_blocking" not in {s.id for s in result.suggestions}
