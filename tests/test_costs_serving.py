"""Cost models of serving-stack custom ops (tracekit.analyzers.costs.models_serving), with FLOPs and
bytes worked out by hand from shapes recorded in the TraceLens B200 vLLM and SGLang MI300X traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_TRACES

from tracekit.analyzers.costs.models import op_cost

BF16, FP8, U8, I64, I32 = "c10::BFloat16", "c10::Float8_e4m3fn", "unsigned char", "long int", "int"


def test_rotary_embedding_vllm_b200():
    # positions [888] int64, query [888, 512] (8 heads of 64), key [888, 64] (1 head), head 64,
    # cos_sin_cache [131072, 64] (rot_dim 64): 888*512 + 888*64 = 511,488 rotated elements
    c = op_cost("_C::rotary_embedding", [[888], [888, 512], [888, 64], [], [131072, 64], []],
                [I64, BF16, BF16, "Scalar", BF16, "Scalar"], concrete=["", "", "", "64", "", "True"])
    assert c is not None
    assert c.flops == 3 * 511_488  # x*cos - y*sin per element
    # positions 888*8 + q/k read and written 2*2*511,488 + one cache row per token 888*64*2
    assert c.bytes == 7_104 + 2_045_952 + 113_664


def test_reshape_and_cache_flash_fp8_cache():
    # key/value [888, 1, 64] bf16 into uint8 (fp8) caches [4213816, 16, 1, 64], slot_mapping [888] int64
    c = op_cost("_C_cache_ops::reshape_and_cache_flash",
                [[888, 1, 64], [888, 1, 64], [4213816, 16, 1, 64], [4213816, 16, 1, 64], [888], [], [], []],
                [BF16, BF16, U8, U8, I64, "", "float", "float"])
    assert c is not None
    # read k, v: 2 * 888*64*2 = 227,328; write 2 * 888*64*1 = 113,664; slots 888*8 = 7,104
    assert c.bytes == 227_328 + 113_664 + 7_104
    assert c.flops == 2 * 888 * 64  # one scale per element written into the fp8 cache


def test_fused_add_rms_norm_in_place():
    # input, residual [888, 2880] bf16 read and overwritten, weight [2880]
    c = op_cost("_C::fused_add_rms_norm", [[888, 2880], [888, 2880], [2880], []], [BF16, BF16, BF16, "Scalar"],
                concrete=["", "", "", "1e-05"])
    assert c is not None
    x = 888 * 2880 * 2
    assert c.bytes == 4 * x + 2880 * 2
    assert c.flops == 6 * 888 * 2880  # 5 for the norm + 1 for the residual add, per element


def test_aiter_add_rmsnorm_and_rmsnorm():
    # aiter add_rmsnorm(out, input, residual_in, residual_out, weight, eps), each [15360, 4096] bf16
    x = 15360 * 4096 * 2
    c = op_cost("aiter::add_rmsnorm", [[15360, 4096]] * 4 + [[4096], []], [BF16] * 5 + ["Scalar"])
    assert c is not None and c.bytes == 4 * x + 4096 * 2
    c = op_cost("aiter::rmsnorm", [[15360, 4096], [15360, 4096], [4096], []], [BF16] * 3 + ["Scalar"])
    assert c is not None and c.bytes == 2 * x + 4096 * 2 and c.flops == 5 * 15360 * 4096


def test_silu_and_mul_sgl_kernel():
    # out [15360, 12288], input [15360, 24576] bf16: read input, write out
    c = op_cost("sgl_kernel::silu_and_mul", [[15360, 12288], [15360, 24576]], [BF16, BF16])
    assert c is not None
    assert c.bytes == 15360 * 24576 * 2 + 15360 * 12288 * 2
    assert c.flops == 5 * 15360 * 12288


def test_static_fp8_quant():
    # out [888, 512] fp8, input [888, 512] bf16, scale [] fp32
    c = op_cost("_C::static_scaled_fp8_quant", [[888, 512], [888, 512], []], [FP8, BF16, "float"])
    assert c is not None
    assert c.bytes == 888 * 512 * 2 + 888 * 512 + 4
    assert c.flops == 2 * 888 * 512


def test_fused_experts_moe():
    # 64 tokens, hidden 2048, 8 experts, w1 [8, 2*1024, 2048], w2 [8, 2048, 1024], top-2
    c = op_cost("vllm::outplace_fused_experts", [[64, 2048], [8, 2048, 2048], [8, 2048, 1024], [64, 2], [64, 2]],
                [BF16, BF16, BF16, "float", I32])
    assert c is not None
    # 64*2 token-expert rows through gemm1 (2048 -> 2048) and gemm2 (1024 -> 2048): 2*128*2048*(2048+1024)
    assert c.flops == 2 * 128 * 2048 * 3072
    # all 8 experts can be active (64*2 >= 8): every weight once, 8*(2048*2048 + 2048*1024)*2 bytes;
    # hidden in and out 2*64*2048*2; topk weights 64*2*4 and ids 64*2*4
    assert c.bytes == 8 * (2048 * 2048 + 2048 * 1024) * 2 + 2 * 64 * 2048 * 2 + 512 + 512
    # one token, top-2: only 2 of the 8 experts' weights are read
    c1 = op_cost("vllm::outplace_fused_experts", [[1, 2048], [8, 2048, 2048], [8, 2048, 1024], [1, 2], [1, 2]],
                 [BF16, BF16, BF16, "float", I32])
    assert c1 is not None and c1.bytes == 2 * (2048 * 2048 + 2048 * 1024) * 2 + 2 * 2048 * 2 + 8 + 8


def test_moe_forward_without_weights_is_unknown():
    # vllm::moe_forward(hidden [888, 3072], router_logits [888, 128], layer_name): no expert weights
    assert op_cost("vllm::moe_forward", [[888, 3072], [888, 128], []], [BF16, BF16, ""]) is None


def test_aiter_mha_batch_prefill_sglang():
    # q [15360, 32, 128], paged K/V [835874, 8, 128] (page 1), cu_seqlens_q [16] (15 sequences),
    # kv_indptr [16], kv_page_indices [15616], causal (argument 12)
    dims = [[15360, 32, 128], [835874, 8, 128], [835874, 8, 128], [16], [16], [15616]] + [[]] * 12
    types = [BF16, BF16, BF16, "int", "int", "int"] + ["Scalar"] * 12
    concrete = ["", "", "", "", "", "", "1024", "1024", "0.", "0.0883", "0.", "False", "True"] + [""] * 5
    c = op_cost("aiter::mha_batch_prefill", dims, types, concrete=concrete)
    assert c is not None
    lq, lk = 15360 / 15, 15616 / 15  # 1024 queries over 1041.07 keys per sequence (averages)
    pairs = 15 * (lq * lk - lq * (lq - 1) / 2)  # bottom-right causal
    assert c.flops == pytest.approx(2 * 32 * pairs * (128 + 128))
    q = 15360 * 32 * 128 * 2
    kv = 15616 * 8 * 128 * 2 * 2
    assert c.bytes == pytest.approx(2 * q + kv + (16 + 16 + 15616) * 4)


def test_sglang_and_xdit_coverage():
    """Share of kernel time with FLOPs and bytes (benchmarks/serving_cost_coverage.py)."""
    base = SHARED_TRACES / "tracelens" / "inference"
    sglang = base / "sglang_prefilldecode" / "sglang_Qwen3-8B_prefilldecode.json.gz"
    xdit = base / "xdit_flux.1_aiter_sage" / "profile_trace_rank_0.json.gz"
    if not sglang.exists() or not xdit.exists():
        pytest.skip("../shared/traces/tracelens/inference is absent (third-party trace corpus)")
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from serving_cost_coverage import coverage  # type: ignore[import-not-found]
    assert coverage(sglang)[0] >= 0.99  # every op of the SGLang step is modelled (86 % before)
    assert coverage(xdit)[0] >= 0.80  # the rest: Inductor pointwise kernels, bytes only


def test_sage_attention_triton_kernel():
    # sage_fwd_1(q int8, k int8, v fp8, ...) with q/k/v [1, 24, 768, 128] (xDiT Flux.1 capture trace)
    dims = [[1, 24, 768, 128]] * 3 + [[], [1, 24, 3], [1, 24, 6], [1, 24, 128]]
    types = ["signed char", "signed char", "c10::Float8_e4m3fnuz", "Scalar", "float", "float", "float"]
    c = op_cost("sage_fwd_1", dims, types, extra={"kernel_backend": "triton"})
    assert c is not None
    assert c.flops == 2 * 24 * 768 * 768 * (128 + 128)  # every (query, key) pair: QK^T and PV
    # bytes: every tensor argument once: 3 * 24*768*128*1 + (72 + 144 + 3072) * 4
    assert c.bytes == 3 * 24 * 768 * 128 + (72 + 144 + 3072) * 4


def test_inductor_rms_norm_kernel_gets_norm_flops():
    name = "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0"  # Inductor's RMSNorm reduction
    c = op_cost(name, [[768, 3072], [3072], [768, 3072]], [BF16, BF16, BF16], extra={"kernel_backend": "triton"})
    assert c is not None
    assert c.flops == 5 * 768 * 3072  # models_nn.NORM_FLOPS per element of the largest tensor
    assert c.bytes == (2 * 768 * 3072 + 3072) * 2


def test_fp4_scaled_mm_counts_both_packed_values():
    # _scaled_mm(A [128, 2048] fp4x2 = K 4096, B [2048, 1024] fp4x2, scales ...) -> 2*128*1024*4096
    fp4 = "c10::Float4_e2m1fn_x2"
    c = op_cost("aten::_scaled_mm", [[128, 2048], [2048, 1024], [128, 256], [256, 1024], [], [], [], []],
                [fp4, fp4, "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "", "", "Scalar", "Scalar"],
                concrete=["", "", "", "", "", "", "15", "False"])
    assert c is not None
    assert c.flops == 2 * 128 * 1024 * 4096


def test_block_scaled_gemm_roofs_on_b200():
    from tracekit.analyzers.devices import DEVICES
    from tracekit.analyzers.roofline import roof_for

    b200 = next(d for d in DEVICES if d.key == "b200")
    assert b200.peak_flops("fp4") == 9000.0e12  # HGX B200: 144 PFLOPS sparse FP4 / 8 GPUs / 2
    # fp4 x fp4 at the fp4 rate, MX-FP8 activations x MX-FP4 weights at the fp8 rate
    assert roof_for("gemm", "fp4", "nvjet_sm100_nvfp4_gemm", b200) == ("fp4", "kernel-name")  # name agrees
    assert roof_for("gemm", "fp4", "some_gemm", b200) == ("fp4", "dtype")
    assert roof_for("gemm", None, "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3", b200)[0] == "fp8"
    # bmm_<C>_<A><B>: the B200 trace's second MoE GEMM writes bf16 (its op allocates a bf16 [5472, 3072]
    # output) from the same MxE2m1 x MxE4m3 inputs as the first: the fp8 rate, not bf16's
    assert roof_for("gemm", None, "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3", b200)[0] == "fp8"
    assert roof_for("gemm", None, "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s3", b200)[0] == "fp4"
    assert roof_for("gemm", None, "bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x64", b200)[0] == "bf16"


def test_flash_attn_varlen_forward_two_equal_sequences():
    # two sequences of 512 tokens: q/k/v [1024, 16, 64] bf16, cu_seqlens [3] int32, causal
    dims = [[1024, 16, 64]] * 3 + [[3], [3], [], [], [], [], []]
    types = [BF16] * 3 + ["int", "int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    concrete = ["", "", "", "", "", "512", "512", "0.0", "0.125", "True", ""]
    c = op_cost("flash_attn::_flash_attn_varlen_forward", dims, types, concrete=concrete)
    assert c is not None
    pairs = 2 * (512 * 512 - 512 * 511 / 2)  # each sequence attends its lower triangle, diagonal included
    assert c.flops == 2 * 16 * pairs * (64 + 64)
    assert c.bytes == 4 * 1024 * 16 * 64 * 2 + 2 * 3 * 4  # q, k, v, out; the two offset arrays
