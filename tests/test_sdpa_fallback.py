"""use_sdpa on SDPA calls that fell back to the math backend (head dim not a multiple of 8, or the
fused backends switched off), and
lower_precision leaving their fp32 score GEMMs alone: synthetic H200 traces with hand-computed numbers."""

from __future__ import annotations

import pytest
from tracebuilder import Cursor, TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import sdpa_fallback as sf
from tracekit.suggestions import rules_kernels, rules_precision

B, H, L = 16, 12, 1000  # the held-out attention_padmask.py layer
BF16, F32 = "c10::BFloat16", "float"
BF16_PEAK, BW = 989.4e12, 4800e9  # H200 dense bf16, HBM (device table)
SGEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
HGEMM = "nvjet_sm90_tst_128x288_64x3_2x1_v_bz_coopA_NTT"
ADD = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::CUDAFunctor_add<float> >>"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
SOFTMAX_BWD = "void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, false, false>"
CUDNN_FWD = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"


def sdpa_trace(tmp_path, d: int, fused: bool = False, math_op: bool = True):
    """One step: an SDPA call (q, k, v [16, 12, 1000, d] bf16, a [16, 1, 1, 1000] padding mask) whose
    math backend launches bmm (1000 µs) → add (300) → softmax (200) → bmm (1000) in fp32 (`fused`: one
    800 µs cuDNN kernel instead); its backward: two bmm (1000 µs each) and a softmax backward (200 µs)
    on the score matrix, and an unrelated bf16 weight-gradient mm (500 µs). `math_op` False: the math
    backend's own op is not recorded under the call (the kernels stay)."""
    b = TraceBuilder()
    qkv = [[B, H, L, d]] * 3
    scores, bh = [B, H, L, L], [B * H, L, L]
    c = Cursor(b, 10.0, 100.0)
    kernel = c.kernel

    b.op("aten::scaled_dot_product_attention", 5, 40, **{
        "Input Dims": [*qkv, [B, 1, 1, L], [], [], [], []], "Input type": [BF16] * 3 + ["bool"] + ["Scalar"] * 4,
        "Concrete Inputs": ["", "", "", "", "0.", "False", "", "False"]})
    if fused:
        b.op("aten::_scaled_dot_product_cudnn_attention", 6, 38)
        kernel("aten::_cudnn_attention_forward", CUDNN_FWD, 800, qkv, [BF16] * 3)
    else:
        b.op("aten::_scaled_dot_product_attention_math" if math_op else "aten::_to_copy", 6, 38)
        kernel("aten::bmm", SGEMM, 1000, [[B * H, L, d], [B * H, d, L]], [F32, F32])
        kernel("aten::add_", ADD, 300, [scores, [B, 1, 1, L]], [F32, F32])
        kernel("aten::_softmax", SOFTMAX, 200, [scores, [], []], [F32, "Scalar", "Scalar"])
        kernel("aten::bmm", SGEMM, 1000, [bh, [B * H, L, d]], [F32, F32])
    c.cpu = 100.0
    b.op("autograd::engine::evaluate_function: BmmBackward0", 99, 8)
    kernel("aten::bmm", SGEMM, 1000, [bh, [B * H, L, d]], [F32, F32])
    kernel("aten::bmm", SGEMM, 1000, [[B * H, d, L], bh], [F32, F32])
    b.op("autograd::engine::evaluate_function: SafeSoftmaxBackward0", c.cpu - 1, 4)
    kernel("aten::_softmax_backward_data", SOFTMAX_BWD, 200, [scores, scores], [F32, F32])
    b.op("autograd::engine::evaluate_function: AddmmBackward0", c.cpu - 1, 4)
    kernel("aten::mm", HGEMM, 500, [[B * L, 1200], [1200, 3600]], [BF16, BF16])
    b.annotation("ProfilerStep#1", 0, c.gpu + 10)
    return b.write(tmp_path / f"sdpa_{d}.json")


FWD_US, BWD_US = 1000 + 300 + 200 + 1000, 1000 + 1000 + 200  # the unrelated mm is not attention's
FLOPS = 2.0 * B * H * L * L * (100 + 100) * (1 + 2.5)  # forward 76.8 GFLOP + 2.5× for the backward
FUSED_US = FLOPS / (0.35 * BF16_PEAK) * 1e6  # 776.2 µs at 35 % of the bf16 peak (Q/K/V/O bytes: 64 µs)


def test_the_math_fallback_is_found_with_its_forward_and_backward_kernels(tmp_path):
    a = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 100)))
    t = a.ranks[0].patterns.sdpa_fallback
    assert len(t) == 1
    row = t.iloc[0]
    assert (row[sf.SF_HEAD_DIM], row[sf.SF_BACKEND], row[sf.SF_MASK], row[sf.SF_CALLS]) == (100, "math", "[16, 1, 1, 1000]", 1)
    assert (row[sf.SF_FWD_US], row[sf.SF_BWD_US]) == pytest.approx((FWD_US, BWD_US))
    assert row[sf.SF_FLOPS] == pytest.approx(FLOPS)
    assert int(a.ranks[0].patterns.in_sdpa_fallback.sum()) == 7  # 4 forward + 3 backward kernels
    # the math backend's scores GEMM → softmax → GEMM is SDPA already: not an "unfused attention" too
    assert a.ranks[0].patterns.attention.empty


def test_use_sdpa_says_pad_the_head_dim_and_prices_forward_and_backward(tmp_path):
    a = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 100)))
    s = rules_kernels.use_sdpa(a)
    assert s.saving_us == pytest.approx(FWD_US + BWD_US - FUSED_US)  # 3923.8 µs
    assert s.title == ("Head dim 100 is not a multiple of 8: SDPA fell back to math (1 call per step, 4.70 ms of "
                       "forward + backward kernels per step); pad it to 104/128")
    assert s.evidence[0]["pad_to"] == "104 or 128"
    # the fp32 GEMMs are the math backend's upcast of the score matrix: not lower_precision's
    assert rules_precision.lower_precision(a) is None


def test_an_aligned_head_dim_on_the_math_backend_says_turn_the_fused_backends_on(tmp_path):
    aligned = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 104)))
    t = aligned.ranks[0].patterns.sdpa_fallback
    assert len(t) == 1 and (t.iloc[0][sf.SF_CAUSE], t.iloc[0][sf.SF_BACKEND]) == (sf.SWITCHED_OFF, "math")
    s = rules_kernels.use_sdpa(aligned)
    flops = 2.0 * B * H * L * L * (104 + 104) * (1 + 2.5)  # 79.9 GFLOP forward, 2.5× for the backward
    assert s.saving_us == pytest.approx(FWD_US + BWD_US - flops / (0.35 * BF16_PEAK) * 1e6)  # 3892.8 µs
    assert s.title.startswith("SDPA ran its math backend on aligned bf16 inputs (1 call per step, 4.70 ms of ")
    assert "turn flash/efficient/cuDNN SDPA back on" in s.title
    # the fp32 GEMMs are the math backend's upcast of the score matrix: not lower_precision's
    assert rules_precision.lower_precision(aligned) is None


def test_silent_without_the_math_op_or_with_a_fused_backend(tmp_path):
    unnamed = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 104, math_op=False)))
    assert unnamed.ranks[0].patterns.sdpa_fallback.empty  # aligned, no math op: nothing says math ran
    s = rules_kernels.use_sdpa(unnamed)  # the same math kernels read as an unfused chain, priced forward only
    assert s is None or not s.title.startswith(("Head dim", "SDPA ran"))
    # then the fp32 GEMMs are lower_precision's (nothing tells them from the user's)
    assert rules_precision.lower_precision(unnamed) is not None
    fused = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 100, fused=True)))
    assert fused.ranks[0].patterns.sdpa_fallback.empty
    assert rules_kernels.use_sdpa(fused) is None


def test_autocast_s_fp32_call_is_priced_in_the_dtype_its_kernels_ran(tmp_path):
    """autocast records an outer fp32 SDPA call and an inner bf16 one: the fused estimate is bf16's."""
    b = TraceBuilder()
    qkv = [[B, H, L, 64]] * 3
    c = Cursor(b, 10.0, 100.0)
    b.op("aten::scaled_dot_product_attention", 5, 40, **{"Input Dims": [*qkv, [], [], [], [], []],
                                                           "Input type": [F32] * 3 + [""] + ["Scalar"] * 4})
    b.op("aten::scaled_dot_product_attention", 6, 38, **{"Input Dims": [*qkv, [], [], [], [], []],
                                                           "Input type": [BF16] * 3 + [""] + ["Scalar"] * 4})
    b.op("aten::_scaled_dot_product_attention_math", 7, 36)
    c.kernel("aten::bmm", SGEMM, 1000, [[B * H, L, 64], [B * H, 64, L]], [F32, F32])
    c.kernel("aten::_softmax", SOFTMAX, 200, [[B, H, L, L], [], []], [F32, "Scalar", "Scalar"])
    c.kernel("aten::bmm", SGEMM, 1000, [[B * H, L, L], [B * H, L, 64]], [F32, F32])
    b.annotation("ProfilerStep#1", 0, c.gpu + 10)
    a = analyze(tracekit.load_trace(b.write(tmp_path / "autocast.json")))
    row = a.ranks[0].patterns.sdpa_fallback.iloc[0]
    assert (row[sf.SF_DTYPE], row[sf.SF_CAUSE], row[sf.SF_CALLS]) == ("bf16", sf.SWITCHED_OFF, 1)
    s = rules_kernels.use_sdpa(a)  # forward only: 2·B·H·L²·128 FLOP at 35 % of the bf16 peak = 141.9 µs
    assert s.saving_us == pytest.approx(2200 - 2.0 * B * H * L * L * 128 / (0.35 * BF16_PEAK) * 1e6)


def test_the_diff_target_counts_the_fallback_kernels(tmp_path):
    from tracekit.analyzers import step_parts

    a = analyze(tracekit.load_trace(sdpa_trace(tmp_path, 100)))
    # one step: the forward and backward kernels of the math fallback, no fused attention kernel
    assert step_parts.attention_chain(a, step_parts.steady(a)) == pytest.approx(FWD_US + BWD_US)
