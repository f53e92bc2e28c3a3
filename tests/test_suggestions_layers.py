"""Rules lower_precision (convolutions), channels_last and fused_llm_kernels on synthetic H200 traces with hand-computed savings."""

from __future__ import annotations

import json

import pytest
from test_suggestions_kernels import BF16, BF16GEMM, EW, F32, Stream, _analysis

from tracekit.analyzers.detectors import layers
from tracekit.suggestions import rules_llm, rules_precision
from tracekit.suggestions.rules import RULES_BY_ID

DGRAD = "sm90_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x32_cudnn"
BN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)"
TRANSPOSE = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
FOREACH = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpListAlphaFunctor<float>>"
ACT = [64, 64, 56, 56]  # an activation, NCHW
W = [64, 64, 3, 3]


def conv_trace(tmp_path, transposes: bool = True, dtype: str = F32, conv: str = DGRAD):
    """A conv-net step: nchwToNhwc transpose (100 µs), a TF32 conv backward (2000 µs), BatchNorm
    (300 µs), ReLU on the activation (200 µs), an optimizer foreach add (50 µs)."""
    s = Stream()
    if transposes:
        s.kernel("aten::convolution_backward", TRANSPOSE, 100, [ACT], [dtype])
    s.kernel("aten::convolution_backward", conv, 2000, [ACT, ACT, W], [dtype, dtype, dtype])
    s.kernel("aten::cudnn_batch_norm", BN, 300, [ACT, [64], [64], [64], [64]], [dtype] * 5)
    s.kernel("aten::relu_", EW.format("relu"), 200, [ACT], [dtype])
    s.kernel("aten::_foreach_add_", FOREACH, 50, [[64, 64, 3, 3]], [dtype])
    return s.write(tmp_path / "conv.json")


# a conv kernel named tf32, and one whose name gives no precision (TF32 assumed: cudnn.allow_tf32 is on by default)
@pytest.mark.parametrize("conv", [DGRAD, "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)"])
def test_lower_precision_counts_convolutions_and_norms(tmp_path, conv):
    a = _analysis(conv_trace(tmp_path, conv=conv))
    s = RULES_BY_ID["lower_precision"].run(a)
    by_class = {e["class"]: e for e in s.evidence}
    # the TF32 conv (named tf32; 29.6 GFLOP in 2 ms, compute-bound) at the bf16 roof: × 494.7 / 989.4 = ½;
    # the 4-D ReLU moves bf16 activations: half its time. BatchNorm (torch's own kernels under autocast)
    # and the foreach add (the optimizer) stay.
    assert by_class["conv"]["model"] == "TF32 → bf16 roof" and by_class["conv"]["new_time_us"] == pytest.approx(1000)
    assert by_class["elementwise"]["new_time_us"] == pytest.approx(100)
    assert set(by_class) == {"conv", "elementwise"}
    assert s.saving_us == pytest.approx(1000 + 100)
    assert "convolutions" in s.title and "channels_last" in s.snippet


def test_lower_precision_silent_on_a_bf16_conv_net(tmp_path):
    assert rules_precision.lower_precision(_analysis(conv_trace(tmp_path, dtype=BF16))) is None


def test_channels_last_names_the_transposes(tmp_path):
    a = _analysis(conv_trace(tmp_path))
    s = RULES_BY_ID["channels_last"].run(a)
    # the NCHW BatchNorm (cudnn_batch_norm, not training: reads x once, the 4 parameter vectors, writes y:
    # 2 × 64·64·56·56 × 4 B + 4 × 64 × 4 B) as an NHWC kernel at 75 % of 4800 GB/s
    bn_bytes = 2 * 64 * 64 * 56 * 56 * 4 + 4 * 64 * 4
    bn_new = bn_bytes / (0.75 * 4800e9) * 1e6  # 28.5 µs
    assert s.saving_us == pytest.approx(100 + 300 - bn_new)  # + the one transpose kernel's whole time
    rows = {e["change"]: e for e in s.evidence}
    assert rows["layout transpose removed"]["count"] == 1 and "nchwToNhwcKernel" in rows["layout transpose removed"]["kernel"]
    assert rows["NHWC BatchNorm at 75 % of the bandwidth"]["new_time_us"] == pytest.approx(bn_new)
    assert "1 times per step" in s.title and "BatchNorm" in s.title and "channels_last" in s.snippet
    assert a.ranks[0].patterns.layout_transposes.sum() == 1
    assert rules_precision.channels_last(_analysis(conv_trace(tmp_path, transposes=False))) is None


def block_trace(tmp_path, fused: bool = False):
    """An LLM block, forward: q GEMM, flash attention (50 µs), RMSNorm chain (pow, mean, add, rsqrt, mul,
    mul: 6 × 10 µs), gate GEMM, SwiGLU (silu 20 µs, mul 20 µs), down GEMM; each GEMM 100 µs. fused: one
    Triton kernel for each chain, launched by no aten op."""
    s = Stream()
    x = [[8, 1024, 1024]]
    s.kernel("aten::mm", BF16GEMM, 100, [[8192, 1024], [1024, 1024]], [BF16, BF16])
    s.kernel("aten::_scaled_dot_product_flash_attention", "void flash_fwd_kernel<Flash_fwd_kernel_traits>(Flash_fwd_params)",
             50, [[8, 16, 1024, 64]] * 3, [BF16] * 3)
    if fused:
        s.kernel("CompiledFunction", "triton_red_fused_add_mean_mul_pow_rsqrt_0", 10, x, [BF16])
    else:
        for op in ("pow", "mean", "add", "rsqrt", "mul", "mul"):
            s.kernel(f"aten::{op}", EW.format(op), 10, x, [F32])
    s.kernel("aten::mm", BF16GEMM, 100, [[8192, 1024], [1024, 1024]], [BF16, BF16])
    if fused:
        s.kernel("CompiledFunction", "triton_poi_fused_mul_silu_0", 20, x, [BF16])
    else:
        s.kernel("aten::silu", EW.format("silu"), 20, x, [BF16])
        s.kernel("aten::mul", EW.format("mul"), 20, x, [BF16])
    s.kernel("aten::mm", BF16GEMM, 100, [[8192, 1024], [1024, 1024]], [BF16, BF16])
    return s.write(tmp_path / f"block{int(fused)}.json")


def test_fused_llm_kernels_on_an_unfused_block(tmp_path):
    a = _analysis(block_trace(tmp_path))
    table = a.ranks[0].patterns.llm_chains
    got = {r[layers.LC_KIND]: (r[layers.LC_SEGMENTS], r[layers.LC_KERNELS], r[layers.LC_TIME_US], r[layers.LC_FUSED_US])
           for r in table.to_dict("records")}
    # the segments between the GEMMs: RMSNorm's 6 kernels (60 µs, mean 10 µs), SwiGLU's 2 (40 µs, mean 20 µs)
    assert got == {"rms_norm": (1, 6, 60.0, 10.0), "swiglu": (1, 2, 40.0, 20.0)}
    s = RULES_BY_ID["fused_llm_kernels"].run(a)
    assert s.saving_us == pytest.approx((60 - 10) + (40 - 20))
    assert s.evidence[0]["fused_kernel"] == "LigerRMSNorm" and s.evidence[0]["ops"] == "aten::rsqrt"
    assert "liger_kernel" in s.snippet and "rms_norm, swiglu" in s.title
    assert a.ranks[0].patterns.in_llm_chain.sum() == 8


def test_fused_llm_kernels_silent_without_attention(tmp_path):
    """The same chains in a rank with no attention (a ResNet's weight standardisation has an rsqrt too):
    no LLM block (held-out unfold_conv)."""
    path = block_trace(tmp_path)
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "flash" not in str(e.get("name", ""))]
    path.write_text(json.dumps(doc))
    a = _analysis(path)
    assert not a.ranks[0].patterns.llm_chains.empty and rules_llm.fused_llm_kernels(a) is None


def test_fused_llm_kernels_silent_when_fused(tmp_path):
    a = _analysis(block_trace(tmp_path, fused=True))
    assert a.ranks[0].patterns.llm_chains.empty
    assert rules_llm.fused_llm_kernels(a) is None


def test_applied_when_the_transposes_and_the_chains_go(tmp_path):
    from tracekit.compare.applied import applied
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before, after = _analysis(conv_trace(tmp_path / "a")), _analysis(conv_trace(tmp_path / "b", transposes=False))
    # one 100 µs transpose in the one step before, none after
    got = applied("channels_last", before, after)
    assert got.applied is True and got.evidence == "NCHW ↔ NHWC transpose time per step 100 µs → 0 µs"
    assert applied("channels_last", before, before).applied is False
    before, after = _analysis(block_trace(tmp_path / "a")), _analysis(block_trace(tmp_path / "b", fused=True))
    got = applied("fused_llm_kernels", before, after)  # 8 chain kernels (6 + 2) → 0
    assert got.applied is True and got.evidence == "unfused LLM chain kernels per step 8.0 → 0.0"
