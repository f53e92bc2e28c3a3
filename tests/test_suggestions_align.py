"""Rule align_dims on synthetic GEMM traces: M, N and K from the leading dimensions (strides), kernel
names (alignN, fallback architectures), and the reference efficiency (a similar aligned GEMM or the roof)."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import rules_align

BF16 = "c10::BFloat16"
BF16_PEAK = 989.4e12  # H200 dense bf16 (device table)
NVJET = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
ALIGN1 = "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_32x3_nn_align1"
REF_FLOPS = 2 * 4096 * 16384 * 4096  # the reference GEMM [4096, 16384] @ [16384, 4096]
REF_US = 800.0
REF_PCT = 100 * REF_FLOPS / (REF_US * 1e-6) / BF16_PEAK  # 69.46 %


class Gemms:
    """GEMM calls (aten::mm) placed back to back on the GPU: a GPU-bound step."""

    def __init__(self) -> None:
        self.b = TraceBuilder()
        self.cpu, self.gpu = 1.0, 100.0

    def mm(self, kernel: str, dur: float, a: list, b: list, strides: list | None = None) -> None:
        args = {"Input Dims": [a, b], "Input type": [BF16, BF16]}
        if strides is not None:
            args["Input Strides"] = strides
        ext = self.b.op("aten::mm", self.cpu, 2, **args)
        self.b.launch(self.cpu + 0.5, 1, kernel, self.gpu, dur, ext=ext)
        self.cpu += 3
        self.gpu += dur + 1

    def write(self, path):
        self.b.annotation("ProfilerStep#1", 0, self.gpu + 10)
        return self.b.write(path)


def _at_pct(flops: float, pct: float) -> float:
    """µs of a GEMM of `flops` at `pct` % of the bf16 roof."""
    return flops / (pct / 100 * BF16_PEAK) * 1e6


def _fire(path):
    return rules_align.align_dims(analyze(tracekit.load_trace(path)))


def test_vocab_n_against_a_similar_aligned_gemm(tmp_path):
    g = Gemms()
    g.mm(NVJET, REF_US, [4096, 16384], [16384, 4096])
    flops = 2 * 4096 * 4096 * 50257
    t = _at_pct(flops, 40.0)
    g.mm(NVJET, t, [4096, 4096], [4096, 50257])
    s = _fire(g.write(tmp_path / "a.json"))
    # no strides recorded: N = 50257 (a leading dim of row-major operands) is off; padded to 50304 the
    # GEMM runs at the reference's 69.46 % (its FLOPs within 8× of this one's: 549.8 vs 1726.6 GFLOP)
    new = t * (50304 / 50257) * 40.0 / REF_PCT
    assert s.saving_us == pytest.approx(t - new, rel=1e-6)
    row = s.evidence[0]
    assert (row["why"], row["pad"], row["mnk"]) == ("dims N=50257", "N=50257 → 50304", "4096×50257×4096")
    assert row["reference_pct"] == pytest.approx(REF_PCT)


def test_weight_gradient_m_from_the_strides(tmp_path):
    """dW = grad.T @ x: A is the transposed [8192, 50257] gradient, shape [50257, 8192], strides [1, 50257]:
    its leading dimension is 50257 although N = 768 and K = 8192 are aligned."""
    g = Gemms()
    flops = 2 * 50257 * 768 * 8192
    t = _at_pct(flops, 12.0)
    g.mm(NVJET, t, [50257, 8192], [8192, 768], strides=[[1, 50257], [768, 1]])
    s = _fire(g.write(tmp_path / "a.json"))
    row = s.evidence[0]
    assert row["why"] == "leading dim A 50257"
    assert row["pad"] == "M=50257 → 50304"
    # no aligned GEMM in the trace: the reference is 70 % of the roof
    assert row["reference_pct"] == 70.0
    assert s.saving_us == pytest.approx(t - t * (50304 / 50257) * 12.0 / 70.0, rel=1e-6)


def test_align1_fallback_kernel_named(tmp_path):
    """All dims aligned and no strides, but cuBLAS ran a CUTLASS sm75 align1 kernel on the sm_90 device."""
    g = Gemms()
    flops = 2 * 4096 * 4096 * 4096
    t = _at_pct(flops, 15.0)
    g.mm(ALIGN1, t, [4096, 4096], [4096, 4096])
    s = _fire(g.write(tmp_path / "a.json"))
    row = s.evidence[0]
    assert row["why"] == "kernel align1; sm75 kernel on sm_90"
    assert row["pad"] == "(strides)"
    assert s.saving_us == pytest.approx(t - t * 15.0 / 70.0, rel=1e-6)


def test_silent_when_aligned_or_only_m_is_off_in_row_major(tmp_path):
    g = Gemms()
    g.mm(NVJET, _at_pct(2 * 4096 * 4096 * 50304, 40.0), [4096, 4096], [4096, 50304])
    # M = 8191 tokens, row-major operands (leading dims 4096 and 4096): nothing a kernel reads is off
    g.mm(NVJET, _at_pct(2 * 8191 * 4096 * 4096, 40.0), [8191, 4096], [4096, 4096],
         strides=[[4096, 1], [4096, 1]])
    assert _fire(g.write(tmp_path / "a.json")) is None


def test_applied_when_the_vocab_is_padded(tmp_path):
    from tracekit.compare.applied import applied
    flops = 2 * 4096 * 4096 * 50257
    before, after = Gemms(), Gemms()
    before.mm(NVJET, _at_pct(flops, 40.0), [4096, 4096], [4096, 50257])
    after.mm(NVJET, _at_pct(flops, 69.0), [4096, 4096], [4096, 50304])
    b = analyze(tracekit.load_trace(before.write(tmp_path / "b.json")))
    a = analyze(tracekit.load_trace(after.write(tmp_path / "a.json")))
    got = applied("align_dims", b, a)  # one misaligned call per step (N = 50257), none once padded
    assert got.applied is True and got.evidence == "GEMM calls off alignment per step 1.0 → 0.0"
    assert applied("align_dims", b, b).applied is False
