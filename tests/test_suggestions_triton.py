"""Rule triton_config and the user Triton launch detector on synthetic traces with tracekit's Triton metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import triton_launch as tl
from tracekit.suggestions import rules_triton

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
FP16_PEAK = 989.4e12  # H200 dense fp16 (device table)
N = 4096
FLOPS = 2.0 * N**3
ARGS = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
        "stride_cm", "stride_cn", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"]


def triton_trace(tmp_path, tile: int, dur: float, launches: int = 3):
    """`launches` steps, each one user launch of matmul_kernel (N³ fp16) with `tile`×`tile`×`tile` blocks,
    grid [(N / tile)², 1, 1], 4 warps, 3 stages, its kernel `dur` µs."""
    b = TraceBuilder()
    b.top["tracekit"] = {"triton_kernels": [{"name": "matmul_kernel", "arg_names": ARGS,
                                             "constexpr_names": ARGS[12:]}], "triton_metadata": "cpu_op"}
    programs = (N // tile) ** 2
    step_us = dur + 100
    for i in range(launches):
        t0 = i * step_us
        b.annotation(f"ProfilerStep#{i + 1}", t0, step_us)
        ext = b.op("matmul_kernel", t0 + 1, 10, **{
            "kernel_backend": "triton", "tracekit_user_kernel": 1, "grid": f"[{programs}, 1, 1]",
            "num_warps": 4, "num_stages": 3,
            "Input Dims": [[N, N], [N, N], [N, N]] + [[]] * 13,
            "Input type": ["c10::Half"] * 3 + ["Scalar"] * 13,
            "Input Strides": [[N, 1]] * 3 + [[]] * 13,
            "Concrete Inputs": ["", "", ""] + [str(N)] * 3 + [str(N), "1"] * 3 + [str(tile)] * 3 + ["8"]})
        b.launch(t0 + 2, 5, "matmul_kernel", t0 + 20, dur, ext=ext)
    return b.write(tmp_path / "triton.json")


def test_detector_reads_the_launch_metadata(tmp_path):
    a = analyze(tracekit.load_trace(triton_trace(tmp_path, 16, 7000.0)))
    t = a.ranks[0].patterns.triton_launches
    assert len(t) == 1
    row = t.iloc[0]
    assert (row[tl.TL_GRID], row[tl.TL_PROGRAMS], row[tl.TL_WARPS], row[tl.TL_STAGES]) == ("[65536, 1, 1]", 65536, 4, 3)
    assert row[tl.TL_TILE] == "16×16×16"
    assert row[tl.TL_CONSTEXPRS] == "BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=8"
    steps = a.totals.steps  # the headline steps hold one launch each
    assert (row[tl.TL_LAUNCHES], row[tl.TL_KERNELS], row[tl.TL_TIME_US]) == (steps, steps, 7000.0 * steps)


def test_fires_far_below_the_roof(tmp_path):
    a = analyze(tracekit.load_trace(triton_trace(tmp_path, 16, 7000.0)))
    s = rules_triton.triton_config(a)
    roof = FLOPS / FP16_PEAK * 1e6  # 138.9 µs: compute-bound (3 × 32 MiB moved take 21 µs)
    assert s.per_step_us == pytest.approx(7000.0 - roof / rules_triton.TUNED_ROOF_SHARE, rel=1e-6)
    row = s.evidence[0]
    assert row["roof_pct"] == pytest.approx(100 * roof / 7000.0, rel=1e-6)  # 1.98 %
    assert (row["tile"], row["num_warps"], row["num_stages"], row["roof"]) == ("16×16×16", 4, 3, "fp16")
    assert s.title == ("Autotune the Triton kernel matmul_kernel: 16×16×16 tiles, 4 warps, 3 stages on a "
                       "65,536-program grid reach 2 % of the fp16 roof (tuned: 60 %)")
    assert "@triton.autotune" in rules_triton_snippet()


def rules_triton_snippet() -> str:
    from tracekit.suggestions.rules import RULES_BY_ID
    return RULES_BY_ID["triton_config"].snippet


def test_silent_near_the_roof(tmp_path):
    # 128×128 tiles at 61 % of the roof: 138.9 / 0.61 = 227.7 µs
    a = analyze(tracekit.load_trace(triton_trace(tmp_path, 128, FLOPS / FP16_PEAK * 1e6 / 0.61)))
    assert rules_triton.triton_config(a) is None


def test_silent_on_the_tuned_sample():
    path = SAMPLES / "triton_matmul.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/triton_matmul.trace.json.gz is not in this checkout")
    a = analyze(tracekit.load_trace(path))
    assert a.kernels.loc[a.kernels["name"] == "matmul_kernel", "roofline_pct"].iloc[0] > 60  # 63 % (H200)
    assert rules_triton.triton_config(a) is None


def scale_trace(tmp_path, dur: float = 500.0, uses_dot: bool = False):
    """3 steps of one scale_kernel launch (x read, out written: 2²⁴ fp32 each) of `dur` µs; `uses_dot`:
    the kernel table says it calls tl.dot (a matmul-like kernel without M/N/K parameters)."""
    b = TraceBuilder()
    names = ["x_ptr", "out_ptr", "n", "BLOCK"]
    b.top["tracekit"] = {"triton_kernels": [{"name": "scale_kernel", "arg_names": names, "constexpr_names": ["BLOCK"],
                                             **({"uses_dot": True} if uses_dot else {})}]}
    n = 1 << 24
    for i in range(3):
        t0 = i * (dur + 100.0)
        b.annotation(f"ProfilerStep#{i + 1}", t0, dur + 100.0)
        ext = b.op("scale_kernel", t0 + 1, 10, **{
            "kernel_backend": "triton", "tracekit_user_kernel": 1, "grid": f"[{n // 64}, 1, 1]",
            "num_warps": 1, "num_stages": 3, "Input Dims": [[n], [n], [], []],
            "Input type": ["float", "float", "Scalar", "Scalar"], "Input Strides": [[1], [1], [], []],
            "Concrete Inputs": ["", "", str(n), "64"]})
        b.launch(t0 + 2, 5, "scale_kernel", t0 + 20, dur, ext=ext)
    return b.write(tmp_path / f"scale_{dur:g}_{uses_dot}.json")


SCALE_ROOF = 2 * (1 << 24) * 4 / 4800e9 * 1e6  # 134.2 MB at 4800 GB/s = 27.96 µs


def test_without_a_cost_model_the_tensor_bytes_set_the_roof(tmp_path):
    """A kernel tracekit has no cost model for (its parameters name no M/N/K): one read of x and one
    write of out; run in 500 µs it is at 5.6 % of the bandwidth."""
    a = analyze(tracekit.load_trace(scale_trace(tmp_path)))
    s = rules_triton.triton_config(a)
    assert s.evidence[0]["roof_pct"] == pytest.approx(100 * SCALE_ROOF / 500.0)
    # no tl.dot, no cost model: memory-bound, a tuned kernel at 75 % of the bandwidth
    assert s.per_step_us == pytest.approx(500.0 - SCALE_ROOF / 0.75)
    assert s.evidence[0]["tile"] == "64"
    assert s.title.endswith("try BLOCK ∈ {1024, 2048, 4096, 8192}, num_warps ∈ {4, 8, 16}")


def test_a_tl_dot_kernel_without_a_cost_model_keeps_the_compute_shares(tmp_path):
    # at 5.6 % of the bandwidth both fire; the tl.dot one is priced at 60 %, not 75 %
    s = rules_triton.triton_config(analyze(tracekit.load_trace(scale_trace(tmp_path, uses_dot=True))))
    assert s.per_step_us == pytest.approx(500.0 - SCALE_ROOF / 0.6)
    assert "try BLOCK" not in s.title
    # at 40 %: below the memory-bound 60 % line, above the compute-bound 30 % one
    slow = SCALE_ROOF / 0.4
    assert rules_triton.triton_config(analyze(tracekit.load_trace(scale_trace(tmp_path, slow)))) is not None
    assert rules_triton.triton_config(analyze(tracekit.load_trace(scale_trace(tmp_path, slow, uses_dot=True)))) is None


# The held-out LayerNorm (benchmarks/heldout/triton_layernorm.py): rows of 4096 fp16, x read and y
# written once per launch = 2 × 4096 × 2 B per row, plus w and b (2 × 8 KiB).
LN_ROWS, LN_N = 32768, 4096
LN_BYTES = 2 * LN_ROWS * LN_N * 2 + 2 * LN_N * 2  # 536,887,296 B


def layernorm_trace(tmp_path, dur: float, block: int, warps: int):
    """3 steps of one layer_norm_fwd launch (grid [32768, 1, 1]) of `dur` µs."""
    b = TraceBuilder()
    names = ["X", "Y", "W", "B", "stride", "N", "eps", "BLOCK_SIZE"]
    b.top["tracekit"] = {"triton_kernels": [{"name": "layer_norm_fwd", "arg_names": names,
                                             "constexpr_names": ["BLOCK_SIZE"]}]}
    for i in range(3):
        t0 = i * (dur + 100.0)
        b.annotation(f"ProfilerStep#{i + 1}", t0, dur + 100.0)
        ext = b.op("layer_norm_fwd", t0 + 1, 10, **{
            "kernel_backend": "triton", "tracekit_user_kernel": 1, "grid": f"[{LN_ROWS}, 1, 1]",
            "num_warps": warps, "num_stages": 3, "Input Dims": [[LN_ROWS, LN_N], [LN_ROWS, LN_N], [LN_N], [LN_N], [], [], [], []],
            "Input type": ["c10::Half"] * 4 + ["Scalar"] * 4, "Input Strides": [[LN_N, 1], [LN_N, 1], [1], [1], [], [], [], []],
            "Concrete Inputs": ["", "", "", "", str(LN_N), str(LN_N), "1e-05", str(block)]})
        b.launch(t0 + 2, 5, "layer_norm_fwd", t0 + 20, dur, ext=ext)
    return b.write(tmp_path / "ln.json")


def test_memory_bound_kernel_far_below_the_bandwidth_fires(tmp_path):
    # 209.4 µs: the held-out trace's mean kernel (10,050.54 µs / 48 launches, raw events) = 53.4 % of 4800 GB/s
    a = analyze(tracekit.load_trace(layernorm_trace(tmp_path, 209.4, 256, 1)))
    s = rules_triton.triton_config(a)
    roof = LN_BYTES / 4800e9 * 1e6  # 111.85 µs
    assert s.evidence[0]["roof_pct"] == pytest.approx(100 * roof / 209.4)
    assert s.per_step_us == pytest.approx(209.4 - roof / 0.75)  # 60.3 µs: the kernel at 75 % of the bandwidth
    assert s.title == ("Autotune the Triton kernel layer_norm_fwd: 256 tiles, 1 warp, 3 stages on a 32,768-program "
                       "grid reach 53 % of the memory roof (tuned: 75 %); try BLOCK_SIZE ∈ {1024, 2048, 4096, 8192}, "
                       "num_warps ∈ {4, 8, 16}")


def test_memory_bound_kernel_near_the_tuned_share_is_silent(tmp_path):
    # 162.4 µs: the fixed trace's mean kernel (7,795.16 µs / 48, BLOCK_SIZE 4096, 8 warps) = 68.9 % ≥ 60 %
    assert rules_triton.triton_config(analyze(tracekit.load_trace(layernorm_trace(tmp_path, 162.4, 4096, 8)))) is None
    # just below the 60 % line (roof / 0.59 = 189.6 µs) it fires; just above (roof / 0.61) it does not
    roof = LN_BYTES / 4800e9 * 1e6
    assert rules_triton.triton_config(analyze(tracekit.load_trace(layernorm_trace(tmp_path, roof / 0.59, 256, 1))))
    assert rules_triton.triton_config(analyze(tracekit.load_trace(layernorm_trace(tmp_path, roof / 0.61, 256, 1)))) is None


def test_diff_credits_a_changed_launch_configuration(tmp_path):
    """tracekit diff: BLOCK_SIZE 256 / 1 warp → 4096 / 8 warps takes 209.4 → 162.4 µs (22 %, less than the
    halving the time signal asks for): the launch configuration's change is what shows it was made."""
    from tracekit.compare.applied import applied

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before = analyze(tracekit.load_trace(layernorm_trace(tmp_path / "a", 209.4, 256, 1)))
    after = analyze(tracekit.load_trace(layernorm_trace(tmp_path / "b", 162.4, 4096, 8)))
    got = applied("triton_config", before, after)
    assert got.applied is True
    assert ("layer_norm_fwd: BLOCK_SIZE=256, 1 warps, 3 stages → layer_norm_fwd: BLOCK_SIZE=4096, 8 warps, 3 stages"
            in got.evidence)
    assert applied("triton_config", before, before).applied is False  # the same configuration and time
