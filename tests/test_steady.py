"""Steady-state selection, step windows and the idle split behind the verdict, on synthetic traces
whose expected numbers are worked out by hand in each docstring."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import idle, steady
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.launch import launch_overhead
from tracekit.analyzers.step_selection import StepsError
from tracekit.analyzers.totals import LaunchTotals, bottleneck
from tracekit.analyzers.windows import find_period


def _load(b: TraceBuilder, tmp_path, name="t.json"):
    return tracekit.load_trace(b.write(tmp_path / name))


def setup_then_steady(tmp_path):
    """Step 0 [0, 5000]: a compile annotation [100, 3100] (3000 µs), 10 cudaMalloc calls of 10 µs,
    a 100 MB pageable upload (launch 3200+100, copy [3210, 3300]) and kernel A [3400, 3420].
    Steps 1..6 [5000 + 100 (k-1), +100]: each one kernel launched at +10 (5 µs) and run
    [+20, +40]; step 4 is slow: 400 µs (kernel at +20..+40 too), so steps 5..6 shift by 300.
    Step 7 is the tail after the last mark: 10 µs, no kernel."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 5000)
    b.annotation("_compile.compile_inner (dynamo_timed)", 100, 3000)
    for i in range(10):
        b.launch(3110 + 10 * i, 10, None, 0, 0, api="cudaMalloc")
    b.launch(3200, 100, "Memcpy HtoD (Pageable -> Device)", 3210, 90, api="cudaMemcpyAsync", kind="memcpy",
             bytes=100_000_000)
    b.launch(3300, 5, "kernel_a", 3400, 20)
    t = 5000.0
    for k in range(1, 7):
        span = 400.0 if k == 4 else 100.0
        b.annotation(f"ProfilerStep#{k}", t, span)
        b.launch(t + 10, 5, "kernel_b", t + 20, 20)
        t += span
    b.annotation("ProfilerStep#7", t, 10)
    return _load(b, tmp_path)


def test_setup_outlier_and_partial_steps(tmp_path):
    lo = launch_overhead(setup_then_steady(tmp_path).rank())
    phases = {p.step: p for p in lo.phases}
    # spans of steps 1..6: 100, 100, 100, 400, 100, 100; median 100, MAD 0 -> floor 2 µs:
    # step 4's z = 0.6745 * 300 / 2 = 101 > 3.5 and 300 % away: an outlier after steady steps
    assert [phases[k].phase for k in range(8)] == [
        steady.SETUP, steady.STEADY, steady.STEADY, steady.STEADY, steady.OUTLIER, steady.STEADY, steady.STEADY, steady.PARTIAL]
    assert lo.steady_steps == (1, 2, 3, 5, 6)
    reason = phases[0].reason
    assert "torch.compile 3.00 ms" in reason  # the annotation's 3000 µs
    assert "device allocations 100 µs in 10 calls" in reason  # 10 × 10 µs
    assert "host-to-device upload 100 MB" in reason
    assert "4.0× the median step" in phases[4].reason
    assert "launched 0 kernels" in phases[7].reason
    # the headline covers the 5 steady steps: 5 × 100 µs, 5 × 20 µs of GPU work
    assert lo.totals.steps == 5
    assert lo.totals.span_us == pytest.approx(500.0)
    assert lo.totals.gpu_busy_us == pytest.approx(100.0)
    assert lo.all_totals.steps == 8


def test_steps_option_selects_all_or_a_range(tmp_path):
    trace = setup_then_steady(tmp_path)
    every = analyze(trace, steps="all")
    assert every.totals.steps == 8 and every.steps_mode == "all"
    some = analyze(trace, steps="2-4")
    assert some.totals.steps == 3
    assert some.totals.span_us == pytest.approx(600.0)  # 100 + 100 + 400
    doc = analyze(trace).to_dict()
    assert [x["step"] for x in doc["steady_steps"]] == [1, 2, 3, 5, 6]
    assert [(x["step"], x["phase"]) for x in doc["excluded_steps"]] == [
        (0, "setup"), (4, "outlier"), (7, "partial")]
    json.dumps(doc, allow_nan=False)
    with pytest.raises(StepsError, match="40-50 selects no step of rank 0"):
        analyze(trace, steps="40-50")
    with pytest.raises(StepsError):
        analyze(trace, steps="every")


def test_kernel_rows_cover_the_steady_steps_only(tmp_path):
    """kernel_a runs only in the set-up step: it is not a kernel row of the headline."""
    a = analyze(setup_then_steady(tmp_path))
    assert set(a.kernels["name"]) == {"kernel_b"}
    assert int(a.kernels["count"].sum()) == 5


def test_trace_without_steps_leaves_out_prologue_and_tail(tmp_path):
    """CPU work [0, 1000] before the first launch at 900 (5 µs); kernels [910, 1410] and
    [1420, 1920] (second launched at 905 before the GPU was free); CPU work [1950, 3000] after.
    The window is 900 .. 1920 = 1020 µs with 1000 µs busy: gpu-bound."""
    b = TraceBuilder()
    b.op("aten::randn", 0, 890)
    b.launch(900, 5, "gemm_a", 910, 500)
    b.launch(905, 5, "gemm_b", 1420, 500)
    b.op("aten::print", 1950, 1050)
    lo = launch_overhead(_load(b, tmp_path).rank())
    assert lo.scope == "trace"
    assert lo.totals.span_us == pytest.approx(1020.0)
    assert lo.totals.gpu_busy_us == pytest.approx(1000.0)
    assert lo.verdict == "gpu-bound"


def test_repeated_top_level_ops_become_steps(tmp_path):
    """A prologue op, then 4 iterations of (aten::linear -> 1 kernel, aten::relu -> 1 kernel),
    each iteration 100 µs on the CPU; kernels of iteration k run [200 + 100k, 230 + 100k] and
    [240 + 100k, 250 + 100k]: 4 inferred steps; GPU-side windows 100 µs, last one 50 µs long."""
    b = TraceBuilder()
    b.op("aten::empty", 0, 50)
    for k in range(4):
        t = 100 + 100 * k
        e1 = b.op("aten::linear", t, 40)
        b.launch(t + 5, 5, "gemm", t + 100, 30, ext=e1)
        e2 = b.op("aten::relu", t + 50, 40)
        b.launch(t + 55, 5, "relu_kernel", t + 140, 10, ext=e2)
    lo = launch_overhead(_load(b, tmp_path).rank())
    assert lo.scope == "inferred"
    assert list(lo.steps["step"]) == [0, 1, 2, 3]
    assert list(lo.steps["kernels"]) == [2, 2, 2, 2]
    assert lo.steps["span_us"].tolist() == pytest.approx([100.0, 100.0, 100.0, 50.0])
    assert lo.steps["gpu_busy_us"].tolist() == pytest.approx([40.0, 40.0, 40.0, 40.0])


def test_find_period():
    codes = np.array([9, 8] + [1, 2, 3] * 5 + [7])
    assert find_period(codes) == (2, 3, 5)  # starts at 2, period 3, 5 repeats
    assert find_period(np.array([1, 2, 3, 4, 5])) is None


def idle_trace(tmp_path):
    """One step [0, 1000] on one stream:
    - k1 launched 0+5, runs [10, 110];
    - a DataLoader annotation [120, 320]; k2 launched 330+5, runs [340, 440]: the gap [110, 340]
      is late until 335 + 20 = 355 > 340, so all 230 µs are CPU-late: 200 in the DataLoader, 30 launch;
    - `aten::item` sync [450, 600] (cudaStreamSynchronize), then Python until k3 launched at 700+5,
      runs [710, 760]: gap [440, 710] (270 µs): sync window [450, 710] holds 260 µs, 10 µs launch;
    - a pageable copy call [770, 870] with its GPU copy [780, 860], then k4 launched 880+5 runs
      [950, 990]: gaps [760, 780] (late: the copy call started at 770, so 770 - 760 = 10... the
      whole gap is before the call returned: copy window [770, 870] holds 10, launch 10) and
      [860, 950] (late until 885 + 20 = 905: copy window holds 10, launch 35, GPU gap 45);
    - the first gap [0, 10] is late too (k1's call returned at 5, + 20 > 10): launch 10;
    - tail [990, 1000]: 10 µs late, launch."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1000)
    b.launch(0, 5, "k1", 10, 100)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 120, 200)
    b.launch(330, 5, "k2", 340, 100)
    item = b.op("aten::item", 445, 160)
    b.launch(450, 150, None, 0, 0, api="cudaStreamSynchronize", ext=item)
    b.launch(700, 5, "k3", 710, 50)
    b.launch(770, 100, "Memcpy HtoD (Pageable -> Device)", 780, 80, api="cudaMemcpyAsync", kind="memcpy",
             bytes=1 << 20)
    b.launch(880, 5, "k4", 950, 40)
    return _load(b, tmp_path).rank()


def test_idle_split(tmp_path):
    lo = launch_overhead(idle_trace(tmp_path))
    t = lo.step_totals[0]
    assert t.gpu_busy_us == pytest.approx(370.0)  # 100 + 100 + 50 + 80 + 40
    assert t.data_wait_us == pytest.approx(200.0)
    assert t.sync_wait_us == pytest.approx(260.0)
    assert t.copy_wait_us == pytest.approx(20.0)
    # [0, 10] before k1 (launched at 0: late until 5 + 20), 30, 10, 10, 35 and the 10 µs tail
    assert t.launch_gap_us == pytest.approx(10.0 + 30.0 + 10.0 + 10.0 + 35.0 + 10.0)
    assert t.gpu_gap_us == pytest.approx(45.0)  # [905, 950]: k4 was launched, the GPU did not start it
    assert t.pageable_copy_us == pytest.approx(80.0)
    parts = sum(getattr(t, name) for name in idle.COMPONENTS if name not in (idle.PAGEABLE_COPY, idle.COMM_EXPOSED))
    assert parts == pytest.approx(t.span_us - t.gpu_busy_us)  # the split covers every idle µs


@pytest.mark.parametrize(("totals", "expected"), [
    (LaunchTotals(gpu_ops=0, span_us=10.0), ("cpu-only", None)),
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=80.0), ("gpu-bound", None)),
    # 79 busy + 1 µs the GPU waited on itself = 80 %
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=79.0, gpu_gap_us=1.0), ("gpu-bound", None)),
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=79.0, launch_gap_us=21.0), ("launch-bound", "launch")),
    # rest 50: data 30 >= 25
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=50.0, data_wait_us=30.0, launch_gap_us=20.0),
     ("host-bound", "data_loading")),
    # rest 50: launch 26 >= 25
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=50.0, data_wait_us=24.0, launch_gap_us=26.0),
     ("launch-bound", "launch")),
    # rest 60 split 20/20/20: nothing reaches 30; ties keep the CAUSES order (launch, ..., sync, ...)
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=40.0, sync_wait_us=20.0, cpu_wait_us=20.0,
                  launch_gap_us=20.0), ("mixed", "launch+sync")),
    # busy 60 of which 30 pageable copy: compute 30, rest 70, copies 30 + 10 = 40 >= 35
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=60.0, pageable_copy_us=30.0, copy_wait_us=10.0,
                  launch_gap_us=30.0), ("host-bound", "copies")),
    # busy 90 of which 40 exposed collectives: compute 50, rest 50, communication 40
    (LaunchTotals(gpu_ops=1, span_us=100.0, gpu_busy_us=90.0, comm_exposed_us=40.0, launch_gap_us=10.0),
     ("communication-bound", "communication")),
])
def test_bottleneck_rule(totals, expected):
    assert bottleneck(totals) == expected


def test_sync_copies_are_syncs_not_launches(tmp_path):
    """A synchronous hipMemcpyWithStream of 463 µs: one sync (463 µs of CPU waiting), no launch."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1000)
    b.launch(0, 5, "k1", 10, 100)
    b.launch(200, 463, "Memcpy DtoH (Device -> Pageable)", 210, 440, api="hipMemcpyWithStream", kind="memcpy",
             bytes=1 << 20)
    lo = launch_overhead(_load(b, tmp_path).rank())
    t = lo.totals
    assert (t.launches, t.syncs) == (1, 1)
    assert t.cpu_launch_us == pytest.approx(5.0) and t.sync_us == pytest.approx(463.0)
    assert t.gpu_ops == 2  # the copy still links to its call


def ten_gemms(tmp_path):
    """No ProfilerStep: 1.99 ms of CPU prologue (aten::randn), then ten 4096³ bf16 aten::mm launched
    back to back (each call 5 µs, every 10 µs) whose kernels run 176 µs each, one after the other
    from 2010 µs on (512 blocks each: more than the H200's 132 SMs)."""
    b = TraceBuilder()
    b.op("aten::randn", 0, 1990)
    dims = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    for i in range(10):
        t = 2000 + 10 * i
        ext = b.op("aten::mm", t, 8, **dims)
        b.launch(t + 1, 5, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 2010 + 176 * i, 176, ext=ext,
                 grid=[16, 32, 1])
    return _load(b, tmp_path, "gemms.json")


def test_gemms_that_fill_the_gpu_are_gpu_bound_and_not_batched(tmp_path):
    from tracekit.suggestions import suggest

    a = analyze(ten_gemms(tmp_path))
    # the 10 mm calls repeat: 10 inferred steps, each measured on the GPU (176 µs apart)
    lo = a.ranks[0].launch
    assert lo.scope == "inferred" and len(lo.steps) == 10
    assert a.verdict == "gpu-bound"  # the 2 ms prologue is not GPU idle time
    assert a.totals.span_us / a.totals.steps == pytest.approx(176.0)
    assert "batch_bmm" not in {s.id for s in suggest(a)}


def test_a_long_synchronous_copy_is_a_sync(tmp_path):
    """A decode step: a 100 µs kernel, then a hipMemcpyWithStream (DtoH) that waits 463 ms for a
    kernel on another stream (400 ms) and copies; 50 ms of Python before the next launch."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 1_000_000)
    b.launch(0, 5, "k_small", 10, 100)
    b.launch(20, 5, "k_long", 30, 400_000, stream=9)
    b.launch(200, 463_000, "Memcpy DtoH (Device -> Pageable)", 400_100, 62_000, api="hipMemcpyWithStream",
             kind="memcpy", bytes=1 << 20)
    b.launch(513_200, 5, "k_next", 513_210, 100)
    lo = launch_overhead(_load(b, tmp_path, "sglang.json").rank())
    t = lo.totals
    assert (t.launches, t.syncs) == (3, 1)  # the copy is a sync, not a launch
    assert t.sync_us == pytest.approx(463_000.0)
    # idle [400030, 400100] before the copy starts lies inside the blocking call (70 µs); idle
    # [462100, 513210]: late until k_next's call returns (513205) + 20 µs: the call covers
    # [462100, 463200] (1100 µs). The sync window runs from the call to the next GPU start, less the
    # host work after it: k_next's call starts 50000 µs (> 1 ms) after the copy returned, so the CPU
    # was busy, not blocked, over [463200, 513200]: that is CPU work; the sync keeps the launch path
    # [513200, 513210]. (Before the sync / cpu_work split all 50010 µs were sync.) The step's idle tail
    # after k_next (513310 → 1000000, no activity after it: late, over 1 ms) is CPU work too.
    assert t.copy_wait_us == pytest.approx(70.0 + 1100.0)
    assert t.sync_wait_us == pytest.approx(513_210 - 513_200)
    assert t.cpu_wait_us == pytest.approx((513_200 - 463_200) + (1_000_000 - 513_310))
    assert (t.verdict, t.cause) != ("launch-bound", "launch")


def eager_then_graphs(tmp_path, replay: bool = True, after: int = 5):
    """Steps 0..5 eager: 1000 µs each, 10 launches of a 20 µs kernel. Step 6 (2000 µs) captures a CUDA
    graph: cudaStreamBeginCapture (50 µs) and cudaGraphInstantiateWithFlags (200 µs): 250 µs of
    capture, 12.5 % of the step (over the 5 % evidence share), and launches its 10 kernels eagerly.
    Then `after` steps of 200 µs: with `replay`, one cudaGraphLaunch running 10 kernels of 15 µs;
    without, 10 eager launches again (and 1000 µs steps). A last 10 µs step is the tail."""
    b = TraceBuilder()
    t = 0.0

    def eager(t0: float) -> None:
        for i in range(10):
            b.launch(t0 + 10 + 20 * i, 5, "kernel_e", t0 + 20 + 60 * i, 20)

    for k in range(6):
        b.annotation(f"ProfilerStep#{k}", t, 1000)
        eager(t)
        t += 1000
    b.annotation("ProfilerStep#6", t, 2000)
    b.launch(t + 300, 50, None, 0, 0, api="cudaStreamBeginCapture")
    b.launch(t + 400, 200, None, 0, 0, api="cudaGraphInstantiateWithFlags")
    eager(t + 1000)
    t += 2000
    for k in range(7, 7 + after):
        span = 200.0 if replay else 1000.0
        b.annotation(f"ProfilerStep#{k}", t, span)
        if replay:
            corr = b.launch(t + 5, 8, "kernel_g", t + 20, 15)
            for i in range(1, 10):
                b.gpu("kernel_g", t + 20 + 17 * i, 15, corr)
        else:
            eager(t)
        t += span
    b.annotation(f"ProfilerStep#{7 + after}", t, 10)
    return _load(b, tmp_path)


def test_steps_before_a_graph_capture_are_an_earlier_regime(tmp_path):
    lo = launch_overhead(eager_then_graphs(tmp_path).rank())
    phases = {p.step: p for p in lo.phases}
    # launches per step: 10 in steps 0..5, 1 in steps 7..11; (10 + 1) / (1 + 1) = 5.5 >= 1.5
    assert [phases[k].phase for k in range(13)] == [steady.WARMUP] * 6 + [steady.SETUP] + [steady.STEADY] * 5 + [steady.PARTIAL]
    assert "an earlier regime: 10 launches per step before step 6 (CUDA graph capture), 1 after it" in phases[0].reason
    assert "CUDA graph capture 250 µs in 2 calls" in phases[6].reason
    assert lo.steady_steps == (7, 8, 9, 10, 11)
    assert lo.totals.span_us == pytest.approx(5 * 200.0)
    assert lo.totals.gpu_busy_us == pytest.approx(5 * 10 * 15.0)  # 10 kernels of 15 µs, 2 µs apart
    assert lo.totals.launches == 5


def test_capture_without_a_change_of_launches_is_only_set_up(tmp_path):
    """The same capture step, but the steps after it still launch 10 kernels each: one regime, and
    step 6 (2000 µs, twice the 1000 µs median, with capture work) is set-up as before."""
    lo = launch_overhead(eager_then_graphs(tmp_path, replay=False).rank())
    phases = [p.phase for p in lo.phases]
    assert phases == [steady.STEADY] * 6 + [steady.SETUP] + [steady.STEADY] * 5 + [steady.PARTIAL]
    assert not any("earlier regime" in p.reason for p in lo.phases)


def test_two_replays_are_too_few_for_a_regime(tmp_path):
    """MIN_REGIME_STEPS = 3: with 2 replay steps after the capture the eager steps stay."""
    lo = launch_overhead(eager_then_graphs(tmp_path, after=2).rank())
    assert not any("earlier regime" in p.reason for p in lo.phases)
    assert {0, 1, 2, 3, 4, 5} <= set(lo.steady_steps)
