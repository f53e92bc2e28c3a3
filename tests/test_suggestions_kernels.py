"""Suggestion rules fuse_elementwise, lower_precision (GEMMs), align_dims and use_sdpa on
synthetic H200 traces with hand-computed savings."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import rules_kernels, rules_precision, suggest
from tracekit.suggestions.rules import RULES_BY_ID

F32, BF16 = "float", "c10::BFloat16"
BW = 4800e9  # H200 HBM bytes/s (device table)
FP32_PEAK, TF32_PEAK, BF16_PEAK = 66.9e12, 494.7e12, 989.4e12
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{}>"
SGEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_ffma"
TF32GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
BF16GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
SOFTMAX = "void (anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16>"


class Stream:
    """Kernels placed back to back on the GPU (launched well ahead): a GPU-bound step."""

    def __init__(self, span: float = 0.0):
        self.b = TraceBuilder()
        self.cpu = 1.0
        self.gpu = 100.0
        self.span = span

    def kernel(self, op: str, kernel: str, dur: float, dims: list, types: list, gap: float = 1.0) -> None:
        ext = self.b.op(op, self.cpu, 2, **{"Input Dims": dims, "Input type": types})
        self.b.launch(self.cpu + 0.5, 1, kernel, self.gpu, dur, ext=ext)
        self.cpu += 3
        self.gpu += dur + gap

    def write(self, path):
        self.b.annotation("ProfilerStep#1", 0, max(self.span, self.gpu + 10))
        return self.b.write(path)


def _analysis(path):
    return analyze(tracekit.load_trace(path))


N = 8192
BIG = [N, N]


def chain_trace(tmp_path, linked: bool = True, durs: tuple[float, ...] = (120, 120, 120, 170)):
    """gelu(x * w + b) + residual on 8192x8192 fp32 (elementwise_eager.py's chain)."""
    s = Stream()
    s.kernel("aten::mul", EW.format("mul"), durs[0], [BIG, [N]], [F32, F32])
    s.kernel("aten::add", EW.format("add"), durs[1], [BIG, [N], []], [F32, F32, "Scalar"])
    s.kernel("aten::gelu", EW.format("gelu"), durs[2], [BIG if linked else [N, 4096]], [F32])
    s.kernel("aten::add", EW.format("add"), durs[3], [BIG, BIG, []], [F32, F32, "Scalar"])
    return s.write(tmp_path / "chain.json")


CHAIN_BYTES = 9 * N * N * 4 + 2 * N * 4  # x, w; t1; t1, b; t2; t2; t3; t3, residual; out
AVOIDED = 3 * 2 * N * N * 4  # three intermediates, each written once and read once


def test_fuse_elementwise_fires_on_chain(tmp_path):
    a = _analysis(chain_trace(tmp_path))
    s = RULES_BY_ID["fuse_elementwise"].run(a)  # the check, with its row's snippet
    achieved = CHAIN_BYTES / 530e-6  # 4.56 TB/s: the fused kernel is assumed to stream at this rate
    assert achieved < BW
    assert s.saving_us == pytest.approx(AVOIDED / achieved * 1e6)  # 353 µs, below the cap 530 x 3/4
    row = s.evidence[0]
    assert row["ops"] == "aten::mul → aten::add → aten::gelu → aten::add"
    assert (row["shape"], row["dtype"], row["chains"], row["kernels"]) == ("[8192, 8192]", "fp32", 1, 4)
    assert row["avoided_bytes"] == AVOIDED and row["time_us"] == pytest.approx(530.0)
    assert row["bytes"] == pytest.approx(CHAIN_BYTES, rel=1e-6)
    assert "at most 4800 GB/s" in s.formula and "torch.compile" in s.snippet


def test_fuse_elementwise_bandwidth_capped_at_device_peak(tmp_path):
    """Kernels that seem faster than HBM (480 µs: 5.0 TB/s) are costed at the device's 4.8 TB/s."""
    a = _analysis(chain_trace(tmp_path, durs=(110, 110, 110, 150)))
    assert CHAIN_BYTES / 480e-6 > BW
    assert rules_kernels.fuse_elementwise(a).saving_us == pytest.approx(AVOIDED / BW * 1e6)


def test_fuse_elementwise_chain_breaks_where_shapes_differ(tmp_path):
    """gelu reads [8192, 4096], not add's [8192, 8192] output: only mul → add stays a chain."""
    a = _analysis(chain_trace(tmp_path, linked=False))
    chains = a.ranks[0].patterns.chains
    assert chains["ops"].tolist() == ["aten::mul → aten::add"]
    s = rules_kernels.fuse_elementwise(a)
    achieved = (4 * N * N * 4 + 2 * N * 4) / 240e-6
    assert s.saving_us == pytest.approx(2 * N * N * 4 / achieved * 1e6)  # one intermediate


def test_fuse_elementwise_silent_on_single_kernels(tmp_path):
    s = Stream()
    for _ in range(4):  # the same op on the same shapes: a loop over different tensors, not a chain
        s.kernel("aten::clamp", EW.format("clamp"), 50, [[1024, 64], [], []], [F32, "Scalar", "Scalar"])
    s.kernel("aten::gelu", EW.format("gelu"), 50, [[64, 1024]], [F32])  # another tensor
    s.kernel("aten::mm", BF16GEMM, 50, [[1024, 64], [64, 1024]], [BF16, BF16])
    s.kernel("aten::relu", EW.format("relu"), 50, [[1024, 1024]], [BF16])  # after a GEMM: alone
    a = _analysis(s.write(tmp_path / "single.json"))
    assert a.ranks[0].patterns.chains.empty
    assert rules_kernels.fuse_elementwise(a) is None


def gemm_trace(tmp_path, kernel: str, dtype: str, dur: float):
    s = Stream()
    s.kernel("aten::mm", kernel, dur, [[4096, 4096], [4096, 4096]], [dtype, dtype])
    return s.write(tmp_path / "gemm.json")


def test_lower_precision_fires_on_fp32_gemm(tmp_path):
    a = _analysis(gemm_trace(tmp_path, SGEMM, F32, 2500.0))
    s = RULES_BY_ID["lower_precision"].run(a)  # the check, with its row's snippet
    flops = 2 * 4096**3
    eff = flops / 2500e-6 / FP32_PEAK  # 0.82 of the fp32 roof
    new = flops / (TF32_PEAK * eff) * 1e6  # = 2500 x 66.9 / 494.7 = 338 µs
    assert new == pytest.approx(2500 * FP32_PEAK / TF32_PEAK)
    assert s.saving_us == pytest.approx(2500 - new)
    row = s.evidence[0]
    assert row["roofline_pct"] == pytest.approx(100 * eff) and row["new_time_us"] == pytest.approx(new)
    assert row["model"] == "fp32 → TF32 roof"
    assert "allow_tf32" in s.snippet


@pytest.mark.parametrize(("kernel", "dtype", "dur"), [(TF32GEMM, F32, 400.0), (BF16GEMM, BF16, 200.0),
                                                      (SGEMM, F32, 1000.0)])
def test_lower_precision_silent(tmp_path, kernel, dtype, dur):
    """TF32 kernels, bf16 GEMMs, and a 'fp32' GEMM faster than the fp32 peak (already tensor cores)."""
    a = _analysis(gemm_trace(tmp_path, kernel, dtype, dur))
    assert rules_precision.lower_precision(a) is None


B, H, L, D = 8, 16, 2048, 64
SCORES = [B, H, L, L]


def attention_trace(tmp_path, fused: bool = False):
    s = Stream()
    if fused:
        s.kernel("aten::_scaled_dot_product_cudnn_attention",
                 "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
                 300, [[B, H, L, D]] * 3, [BF16] * 3)
        return s.write(tmp_path / "sdpa.json")
    s.kernel("aten::bmm", BF16GEMM, 300, [[B * H, L, D], [B * H, D, L]], [BF16, BF16])
    s.kernel("aten::mul", EW.format("mul"), 450, [SCORES, []], [BF16, "Scalar"])
    s.kernel("aten::masked_fill", EW.format("masked_fill"), 700, [SCORES, [L, L], []], [BF16, "bool", "Scalar"])
    s.kernel("aten::_softmax", SOFTMAX, 500, [SCORES, [], []], [BF16, "Scalar", "Scalar"])
    s.kernel("aten::bmm", BF16GEMM, 350, [[B * H, L, L], [B * H, L, D]], [BF16, BF16])
    return s.write(tmp_path / "naive.json")


def test_use_sdpa_fires_on_naive_attention(tmp_path):
    a = _analysis(attention_trace(tmp_path))
    s = rules_kernels.use_sdpa(a)
    flops = 2 * (2 * B * H * L * L * D)  # the two GEMMs, 137.4 GFLOP
    est = flops / (BF16_PEAK * rules_kernels.FUSED_ATTENTION_EFF) * 1e6
    assert est > 4 * B * H * L * D * 2 / BW * 1e6  # compute, not the Q/K/V/O bytes, bounds it
    assert s.saving_us == pytest.approx(2300 - est)
    row = s.evidence[0]
    assert (row["scores"], row["count"], row["kernels"]) == ("[8, 16, 2048, 2048]", 1, 5)
    assert row["gemm_us"] == pytest.approx(650) and row["other_us"] == pytest.approx(1650)
    assert row["ops"] == "aten::bmm → aten::mul → aten::masked_fill → aten::_softmax → aten::bmm"
    # the scale and mask kernels belong to the attention: fuse_elementwise does not claim them
    assert a.ranks[0].patterns.chains.empty
    assert {x.id for x in suggest(a)} >= {"use_sdpa"}
    assert "fuse_elementwise" not in {x.id for x in suggest(a)}


def test_use_sdpa_silent_on_fused_attention(tmp_path):
    a = _analysis(attention_trace(tmp_path, fused=True))
    assert a.ranks[0].patterns.attention.empty
    assert rules_kernels.use_sdpa(a) is None
