"""lower_precision as bf16 autocast in a transformer trained in fp32 (fp32 fused attention kernels):
GEMMs at the bf16 roof and the attention as a fused bf16 kernel; synthetic H200 traces, numbers by hand."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import rules_precision

F32, BF16 = "float", "c10::BFloat16"
FP32_PEAK, TF32_PEAK, BF16_PEAK, BW = 66.9e12, 494.7e12, 989.4e12, 4800e9  # H200 (device table)
SGEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_ffma"
MEM_EFF_F32 = "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80>)"
CUDNN_BF16 = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
B, L, H, D = 64, 197, 12, 64  # benchmarks/heldout/vit_train.py: 197 tokens, 12 heads of 64
M, K, N = B * L, 768, 3072  # its fc1


def vit_trace(tmp_path, attention_fp32: bool = True, op: str = "aten::_efficient_attention_forward"):
    """One step: an fp32 fc1 GEMM (1200 µs) and a memory-efficient attention forward (300 µs, launched by
    `op`), in fp32 (or, `attention_fp32` False, a bf16 cuDNN attention kernel)."""
    b = TraceBuilder()
    ext = b.op("aten::mm", 1, 2, **{"Input Dims": [[M, K], [K, N]], "Input type": [F32, F32]})
    b.launch(1.5, 1, SGEMM, 100, 1200, ext=ext)
    dtype = F32 if attention_fp32 else BF16
    op = op if attention_fp32 else "aten::_cudnn_attention_forward"
    dims = [[B, L, H, D]] * 3 if attention_fp32 else [[B, H, L, D]] * 3
    if not op.startswith("aten::"):  # a custom Triton attention kernel (aiter's SageAttention: a cost model by name)
        dims = [[B, H, L, D]] * 3
    extra = {} if op.startswith("aten::") else {"kernel_backend": "triton"}
    ext = b.op(op, 4, 2, **{"Input Dims": dims, "Input type": [dtype] * 3, **extra})
    b.launch(4.5, 1, MEM_EFF_F32 if attention_fp32 else CUDNN_BF16, 1301, 300, ext=ext)
    b.annotation("ProfilerStep#1", 0, 1700)
    return b.write(tmp_path / "vit.json")


GEMM_FLOPS = 2.0 * M * K * N  # 59.5 GFLOP in 1200 µs: 49.6 TFLOP/s, 74 % of the fp32 peak
EFF = GEMM_FLOPS / 1200e-6 / FP32_PEAK
ATTN_FLOPS = 2.0 * B * H * L * L * (D + D)  # 7.63 GFLOP


def test_autocast_prices_gemms_at_the_bf16_roof_and_attention_as_a_fused_bf16_kernel(tmp_path):
    s = rules_precision.lower_precision(analyze(tracekit.load_trace(vit_trace(tmp_path))))
    by_class = {row["class"]: row for row in s.evidence}
    # fc1 at 74 % of the bf16 peak: 81.1 µs (half its 203 MB at the bandwidth: 21 µs)
    assert by_class["gemm"]["new_time_us"] == pytest.approx(GEMM_FLOPS / (BF16_PEAK * EFF) * 1e6)
    # attention at 35 % of the bf16 peak: 22.0 µs (half of q, k, v, o's 155 MB: 16.1 µs)
    assert by_class["attention"]["new_time_us"] == pytest.approx(ATTN_FLOPS / (0.35 * BF16_PEAK) * 1e6)
    assert s.saving_us == pytest.approx(1500 - GEMM_FLOPS / (BF16_PEAK * EFF) * 1e6 - ATTN_FLOPS / (0.35 * BF16_PEAK) * 1e6)
    assert s.title.startswith("Autocast to bf16 (torch.autocast): fp32 GEMMs and attention run at fp32 rates")


@pytest.mark.parametrize(("fp32", "op"), [(False, ""), (True, "sage_fwd_1")])
def test_without_torch_fp32_attention_the_gemms_go_to_tf32_as_before(tmp_path, fp32, op):
    # a bf16 attention kernel, or an fp32 one of a custom op (autocast does not change its dtype)
    path = vit_trace(tmp_path, attention_fp32=fp32, op=op or "aten::_efficient_attention_forward")
    a = analyze(tracekit.load_trace(path))
    attention = a.kernels[a.kernels["class"] == "attention"].iloc[0]
    assert attention["flops"] == pytest.approx(ATTN_FLOPS)  # priced either way: 7.63 GFLOP
    s = rules_precision.lower_precision(a)
    assert [row["class"] for row in s.evidence] == ["gemm"]
    assert s.evidence[0]["new_time_us"] == pytest.approx(GEMM_FLOPS / (TF32_PEAK * EFF) * 1e6)  # 162.2 µs
    assert s.title.startswith("Enable TF32 (or bf16 autocast)")
