"""Suggestion rules cuda_graphs and batch_bmm on synthetic traces with hand-computed savings."""

from __future__ import annotations

import math

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import rules_launch, suggest

MM_FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel_trmm"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
F32 = "float"


def _by_id(path):
    return {s.id: s for s in suggest(analyze(tracekit.load_trace(path)))}


def launch_bound_trace(tmp_path):
    """One 1000 µs step: 50 kernels of 2 µs, one launch (5 µs) every 20 µs, each kernel 2 µs after
    its launch returns: 49 host-wait gaps of 18 µs between kernels."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for i in range(50):
        op = b.op("aten::add", 9 + 20 * i, 8, **{"Input Dims": [[256], [256], []],
                                                   "Input type": [F32, F32, "Scalar"]})
        b.launch(10 + 20 * i, 5, ADD, 17 + 20 * i, 2, ext=op)
    return b.write(tmp_path / "launch_bound.json")


def gpu_bound_trace(tmp_path):
    """One step: 10 kernels of 95 µs back to back (launched well ahead): GPU busy 95 %."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for i in range(10):
        op = b.op("aten::add", 1 + 5 * i, 4, **{"Input Dims": [[1 << 24], [1 << 24], []],
                                                 "Input type": [F32, F32, "Scalar"]})
        b.launch(2 + 5 * i, 2, ADD, 50 + 95 * i, 95, ext=op)
    return b.write(tmp_path / "gpu_bound.json")


def test_cuda_graphs_fires_on_launch_bound_step(tmp_path):
    s = _by_id(launch_bound_trace(tmp_path))["cuda_graphs"]
    # idle = 1000 - 50 x 2 = 900; launch gaps = 49 x 18 = 882; each becomes a graph gap (no
    # back-to-back gaps in this trace, so the H200 constant): saving = 882 - 49 x GRAPH_GAP_US
    expected = 49 * 18 - 49 * rules_launch.GRAPH_GAP_US
    assert s.saving_us == pytest.approx(expected)
    assert s.saving_pct == pytest.approx(expected / 10)  # % of the 1000 µs span
    assert s.per_step_us == pytest.approx(expected)
    row = s.evidence[0]
    assert (row["step"], row["kernels"], row["launches"], row["launch_gaps"]) == (1, 50, 50, 49)
    assert row["launch_gap_us"] == pytest.approx(882.0)
    assert row["gpu_busy_us"] == pytest.approx(100.0) and row["verdict"] == "launch-bound"
    assert "1.00 ms − 100 µs" in s.formula and "49 host-wait gaps" in s.formula
    assert "reduce-overhead" in s.snippet


def test_cuda_graphs_keeps_back_to_back_gaps(tmp_path):
    """Gaps while the queue was full (kernel_wait) stay; only host-wait gaps become graph gaps."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 3000)
    for i in range(30):  # 30 kernels queued well ahead: back-to-back, 3 µs apart (kernel_wait)
        b.launch(1 + i, 0.5, ADD, 100 + 13 * i, 10)
    for i in range(40):  # then 40 launch-bound kernels with 30 µs host-wait gaps
        t = 600 + 40 * i
        b.launch(t, 12, ADD, t + 15, 10)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "mixed.json")))
    s = rules_launch.cuda_graphs(a)
    # host waits: the first late kernel (615 - 487 = 128) and 39 x 30; the 29 x 3 µs stay
    expected = (128 + 39 * 30) - 40 * rules_launch.GRAPH_GAP_US
    assert s.saving_us == pytest.approx(expected)
    assert s.evidence[0]["launch_gaps"] == 40


FMHA = "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"


def decode_attention_trace(tmp_path, name, key_lengths):
    """launch_bound_trace's timing (one 1000 µs step, 50 kernels of 2 µs launched every 20 µs), each
    kernel a one-token attention call: query [1, 1, 12, 64], keys and values [1, L, 12, 64] with L
    cycling through `key_lengths` (a cache that grows by a token per call, or a fixed-size one)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for i in range(50):
        length = key_lengths[i % len(key_lengths)]
        op = b.op("aten::_efficient_attention_forward", 9 + 20 * i, 8,
                  **{"Input Dims": [[1, 1, 12, 64], [1, length, 12, 64], [1, length, 12, 64]],
                     "Input type": [F32, F32, F32]})
        b.launch(10 + 20 * i, 5, FMHA, 17 + 20 * i, 2, ext=op)
    return b.write(tmp_path / f"{name}.json")


def test_cuda_graphs_silent_on_a_growing_kv_cache(tmp_path):
    """A CUDA graph replays fixed shapes: with a static cache (every call's keys 53 long) the rule
    prices the step as launch_bound_trace (49 gaps of 18 µs, each then GRAPH_GAP_US); with keys
    33..37 long (a cache grown by one token per call, as transformers' DynamicCache in generate())
    the step cannot be captured as written and the rule is silent."""
    static = analyze(tracekit.load_trace(decode_attention_trace(tmp_path, "static", [53])))
    assert rules_launch.growing_kv_cache(static) is None
    s = rules_launch.cuda_graphs(static)
    assert s is not None and s.saving_us == pytest.approx(49 * 18 - 49 * rules_launch.GRAPH_GAP_US)
    growing = analyze(tracekit.load_trace(decode_attention_trace(tmp_path, "growing", [33, 34, 35, 36, 37])))
    assert rules_launch.growing_kv_cache(growing) == ("aten::_efficient_attention_forward", (33, 34, 35, 36, 37))
    assert rules_launch.cuda_graphs(growing) is None
    # two key lengths (self- and cross-attention of fixed sizes) are not a growing cache
    two = analyze(tracekit.load_trace(decode_attention_trace(tmp_path, "two", [32, 77])))
    assert rules_launch.growing_kv_cache(two) is None and rules_launch.cuda_graphs(two) is not None


def test_cuda_graphs_silent_with_one_kernel_per_step(tmp_path):
    """One launch per step: the graph would need one launch per step too (nothing to remove)."""
    b = TraceBuilder()
    for step in range(1, 21):
        t = 100 * step
        b.annotation(f"ProfilerStep#{step}", t, 100)
        b.launch(t + 60, 5, ADD, t + 70, 10)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "one.json")))
    assert a.verdict == "launch-bound"
    assert rules_launch.cuda_graphs(a) is None


def test_cuda_graphs_silent_when_gpu_bound(tmp_path):
    a = analyze(tracekit.load_trace(gpu_bound_trace(tmp_path)))
    assert a.verdict == "gpu-bound"
    assert rules_launch.cuda_graphs(a) is None


def gemm_loop_trace(tmp_path, n: int = 256, shapes_alternate: bool = False, interleave: bool = False):
    """A Python loop of n 64x64 @ 64x64 fp32 mm every 7 µs: a 3 µs launch, then a 1-block kernel of
    2.5 µs that starts 0.5 µs after the launch returns (4.5 µs host-wait gaps: launch-bound)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 7 * n + 100)
    for i in range(n):
        m = 32 if (shapes_alternate and i % 2) else 64
        t = 10 + 7 * i
        op = b.op("aten::mm", t, 4, **{"Input Dims": [[m, 64], [64, 64]], "Input type": [F32, F32]})
        b.launch(t + 0.5, 3, MM_FP32, t + 4, 2.5, ext=op, grid=[1, 1, 1])
        if interleave:
            add = b.op("aten::add", t + 4.5, 0.5, **{"Input Dims": [[m, 64], [m, 64], []],
                                                      "Input type": [F32, F32, "Scalar"]})
            b.launch(t + 4.6, 0.2, ADD, t + 6.6, 0.3, ext=add)
    return b.write(tmp_path / "loop.json")


def test_batch_bmm_fires_on_loop_of_small_gemms(tmp_path):
    a = analyze(tracekit.load_trace(gemm_loop_trace(tmp_path)))
    s = {x.id: x for x in suggest(a)}["batch_bmm"]
    wall = 255 * 7 + 2.5  # first kernel start to last kernel end
    waves = math.ceil(256 * 1 / 132)  # 1 block each, 132 SMs on the H200 -> 2 waves
    # roofline floor of the batched kernel: 12.58 MB at 4.8 TB/s = 2.62 µs < 2 waves x 2.5 µs
    assert waves * 2.5 > 256 * 3 * 64 * 64 * 4 / 4.8e12 * 1e6
    assert s.saving_us == pytest.approx(wall - waves * 2.5)
    row = s.evidence[0]
    assert (row["op"], row["shapes"], row["runs"], row["gemms_per_run"]) == ("aten::mm", ((64, 64), (64, 64)), 1, 256)
    assert row["batched_us"] == pytest.approx(5.0) and row["kernel_us"] == pytest.approx(2.5)
    assert "2 wave(s)" in s.formula and "torch.bmm" in s.snippet
    # the same loop is launch-bound: the CUDA graph rule fires as well (savings overlap): 255 gaps
    # of 4.5 µs, each replaced by a graph gap
    graphs = {x.id: x for x in suggest(a)}["cuda_graphs"]
    assert graphs.saving_us == pytest.approx(255 * (4.5 - rules_launch.GRAPH_GAP_US))


@pytest.mark.parametrize("kind", ["short", "alternate", "interleaved"])
def test_batch_bmm_silent(tmp_path, kind):
    path = {
        "short": lambda: gemm_loop_trace(tmp_path, n=7),  # below LOOP_MIN_RUN
        "alternate": lambda: gemm_loop_trace(tmp_path, n=64, shapes_alternate=True),  # shapes differ
        "interleaved": lambda: gemm_loop_trace(tmp_path, n=64, interleave=True),  # layer-like: other kernels between
    }[kind]()
    a = analyze(tracekit.load_trace(path))
    assert a.ranks[0].patterns.loops.empty
    assert rules_launch.batch_bmm(a) is None


def test_batch_bmm_without_sm_count_counts_one_wave_per_gemm(tmp_path):
    """No deviceProperties: no SM count, no device: the batched kernel is assumed to take as long
    as the loop's kernels run back to back (only the gaps are saved)."""
    b = TraceBuilder()
    b.top = {"schemaVersion": 1}
    b.annotation("ProfilerStep#1", 0, 200)
    for i in range(10):
        op = b.op("aten::mm", 10 + 10 * i, 4, **{"Input Dims": [[64, 64], [64, 64]], "Input type": [F32, F32]})
        b.launch(10.5 + 10 * i, 2, MM_FP32, 15 + 10 * i, 2.5, ext=op, grid=[1, 1, 1])
    a = analyze(tracekit.load_trace(b.write(tmp_path / "nodev.json")))
    s = rules_launch.batch_bmm(a)
    assert s.saving_us == pytest.approx((9 * 10 + 2.5) - 10 * 2.5)
    assert "SM count or grid unknown" in s.formula
