"""use_sdpa on a hand-written attention in a training step: the forward chain and its backward on the
score matrix against a fused kernel's forward + backward (synthetic H200 trace, numbers by hand)."""

from __future__ import annotations

import pytest
from test_sdpa_fallback import BF16, BF16_PEAK, BW, F32, HGEMM, SOFTMAX  # H200 peaks, kernel names
from tracebuilder import Cursor, TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import attention as at
from tracekit.suggestions import rules_kernels

B, H, L, D = 4, 16, 2048, 64  # the third held-out set's manual_attention.py layer
DIV = "void at::native::vectorized_elementwise_kernel<8, at::native::BUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::DivFunctor<c10::BFloat16>>>"
SOFTMAX_BWD = "void at::native::(anonymous namespace)::cunn_SoftMaxBackwardSmem<4, float, float, float>"


def attention_trace(tmp_path, backward: bool = True):
    """One step of q @ kᵀ (300 µs) → / sqrt(d) (250) → softmax (700) → @ v (300) on [4, 16, 2048, 64]
    bf16 heads; with `backward`: BmmBackward0 of p @ v (dO @ vᵀ, whose inputs are not score-shaped,
    and pᵀ @ dO: 140 µs each), SoftmaxBackward0 (740), DivBackward0 (250), BmmBackward0 of q @ kᵀ
    (dS @ k and qᵀ @ dS: 140 each), then an unrelated weight-gradient mm (500 µs)."""
    b = TraceBuilder()
    bh, scores = [B * H, L, L], [B, H, L, L]
    q, kt, v = [B * H, L, D], [B * H, D, L], [B * H, L, D]
    c = Cursor(b, 10.0, 100.0)
    kernel = c.kernel

    kernel("aten::bmm", HGEMM, 300, [q, kt], [BF16, BF16])
    kernel("aten::div", DIV, 250, [scores, []], [BF16, "double"])
    kernel("aten::_softmax", SOFTMAX, 700, [scores, [], []], [F32, "Scalar", "Scalar"])
    kernel("aten::bmm", HGEMM, 300, [bh, v], [BF16, BF16])
    if backward:
        for node, calls in (
                ("BmmBackward0", [("aten::bmm", HGEMM, 140, [q, kt]), ("aten::bmm", HGEMM, 140, [bh, v])]),
                ("SoftmaxBackward0", [("aten::_softmax_backward_data", SOFTMAX_BWD, 740, [scores, scores])]),
                ("DivBackward0", [("aten::div", DIV, 250, [scores, []])]),
                ("BmmBackward0", [("aten::bmm", HGEMM, 140, [bh, q]), ("aten::bmm", HGEMM, 140, [kt, bh])]),
                ("AddmmBackward0", [("aten::mm", HGEMM, 500, [[8192, 1024], [1024, 1024]])])):
            b.op(f"autograd::engine::evaluate_function: {node}", c.cpu - 1, 3 * len(calls) + 1)
            for op, name, dur, dims in calls:
                kernel(op, name, dur, dims, [BF16] * len(dims))
    b.annotation("ProfilerStep#1", 0, c.gpu + 10)
    return b.write(tmp_path / "attention.json")


FWD_US, BWD_US = 300 + 250 + 700 + 300, 140 + 140 + 740 + 250 + 140 + 140  # the unrelated mm is not attention's
FWD_FLOPS = 2 * (2.0 * B * H * L * L * D)  # the two forward GEMMs: 68.7 GFLOP
QKVO_BYTES = 4 * B * H * L * D * 2  # bf16 Q, K, V and O: 33.6 MB


def test_the_backward_on_the_score_matrix_is_found(tmp_path):
    a = analyze(tracekit.load_trace(attention_trace(tmp_path)))
    p = a.ranks[0].patterns
    (row,) = p.attention.to_dict("records")
    assert row[at.AT_TIME_US] == pytest.approx(FWD_US) and row[at.AT_FLOPS] == pytest.approx(FWD_FLOPS)
    # all six backward kernels, dO @ vᵀ too (it only writes a score-shaped tensor), not the mm
    assert row[at.AT_BWD_US] == pytest.approx(BWD_US) and row[at.AT_BWD_KERNELS] == 6
    assert int(p.in_attention.sum()) == 4 + 6


def test_use_sdpa_prices_forward_and_backward(tmp_path):
    a = analyze(tracekit.load_trace(attention_trace(tmp_path)))
    s = rules_kernels.use_sdpa(a)
    # a fused forward + backward: 3.5 × the forward FLOPs at 35 % of the bf16 peak = 694.6 µs (its
    # bytes, Q, K, V, O and their gradients, 67 MB at 4.8 TB/s = 14 µs, are not the bound)
    fused = max(FWD_FLOPS * 3.5 / (0.35 * BF16_PEAK) * 1e6, 2 * QKVO_BYTES / BW * 1e6)
    assert fused == pytest.approx(694.6, abs=0.1)
    assert s.saving_us == pytest.approx(FWD_US + BWD_US - fused)  # 2405.4 µs
    ev = s.evidence[0]
    assert (ev["forward_us"], ev["backward_us"], ev["sdpa_us"]) == pytest.approx((FWD_US, BWD_US, fused))
    assert "in forward and backward" in s.title and "(1 + 2.5) × the forward FLOPs" in s.formula


def test_inference_attention_is_priced_forward_only(tmp_path):
    a = analyze(tracekit.load_trace(attention_trace(tmp_path, backward=False)))
    assert a.ranks[0].patterns.attention[at.AT_BWD_US].tolist() == [0.0]
    s = rules_kernels.use_sdpa(a)
    # the forward alone: 1550 µs − 68.7 GFLOP at 35 % of the bf16 peak (198.4 µs)
    assert s.saving_us == pytest.approx(FWD_US - FWD_FLOPS / (0.35 * BF16_PEAK) * 1e6)
    assert "backward" not in s.title
