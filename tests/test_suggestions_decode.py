"""Rules batch_decode and quantize_weights on synthetic H200 decode traces with hand-computed savings."""

from __future__ import annotations

import pytest
from test_suggestions_kernels import BF16, BF16_PEAK, BF16GEMM, BW, Stream, _analysis

from tracekit.suggestions import rules_decode
from tracekit.suggestions.rules import RULES_BY_ID

D = 4096


def decode_trace(tmp_path, m: int, dur: float = 10.0):
    """12 calls of x[m, 4096] @ W[4096, 4096] in bf16, `dur` µs each when m ≤ 16 (compute-bound times
    for large m): one forward's GEMMs, no LM head."""
    s = Stream(span=400)
    for _ in range(12):
        t = dur if m <= 16 else 2 * m * D * D / (0.7 * BF16_PEAK) * 1e6
        s.kernel("aten::mm", BF16GEMM, t, [[m, D], [D, D]], [BF16, BF16], gap=20)
    return s.write(tmp_path / f"decode{m}.json")


def requests_trace(tmp_path, requests: int = 2, tokens: int = 3, m: int = 1):
    """`requests` requests one after another in one 2000 µs step, each a prompt forward (x[32, 4096] @ W,
    20 µs; the LM head on its last row, x[1, 4096] @ H[4096, 32768], 80 µs) then `tokens` decode forwards
    (x[m, 4096] @ W 10 µs, the head at m rows 80 µs)."""
    s = Stream(span=2000)
    head = [[D, 32768]]
    for _ in range(requests):
        s.kernel("aten::mm", BF16GEMM, 20.0, [[32, D], [D, D]], [BF16, BF16], gap=20)
        s.kernel("aten::mm", BF16GEMM, 80.0, [[1, D], *head], [BF16, BF16], gap=20)
        for _ in range(tokens):
            s.kernel("aten::mm", BF16GEMM, 10.0, [[m, D], [D, D]], [BF16, BF16], gap=20)
            s.kernel("aten::mm", BF16GEMM, 80.0, [[m, D], *head], [BF16, BF16], gap=20)
    return s.write(tmp_path / f"requests{requests}_{m}.json")


def test_batch_decode_fires_on_requests_one_at_a_time(tmp_path):
    a = _analysis(requests_trace(tmp_path))
    s = RULES_BY_ID["batch_decode"].run(a)
    # requests seen: 8 LM-head calls (forwards) × 2 prompt calls / 8 calls of W = 2: batched 2 at a time
    assert 2 * 2 * D * 32768 / BF16_PEAK * 1e6 < 80  # at 2 rows the head still reads its weights in 80 µs
    # the step (2000 µs: the annotation; its kernels end at 1160 µs) for the 2 requests in one forward:
    # 2000 − (2000 + 0 extra compute) / 2 = 1000 µs
    assert s.saving_us == pytest.approx(1000.0)
    assert {(row["m"], row["count"], row["batch"]) for row in s.evidence} == {(1, 6, 2), (1, 8, 2)}
    assert "2.0 requests per step" in s.formula and "batch 1" in s.title
    assert "generate" in s.snippet
    more = rules_decode.batch_decode(_analysis(requests_trace(tmp_path, requests=12)))
    assert more.evidence[0]["batch"] == rules_decode.DECODE_BATCH  # 12 requests: 8 at a time


@pytest.mark.parametrize("requests, m", [(1, 1), (2, 4)])
def test_batch_decode_silent(tmp_path, requests, m):
    """One request (nothing to batch it with), and requests batched already: 4 rows per decode forward
    (the prompts' LM heads, 2 × 80 µs at one row, are 22 % of the 740 µs of GEMMs, under DECODE_GEMM_SHARE)."""
    assert rules_decode.batch_decode(_analysis(requests_trace(tmp_path, requests, m=m))) is None


@pytest.mark.parametrize("m", [1, 4096])
def test_batch_decode_silent_without_prompts(tmp_path, m):
    """Decode GEMVs with no prompt and no LM head in the window (the requests cannot be counted), and large GEMMs."""
    assert rules_decode.batch_decode(_analysis(decode_trace(tmp_path, m))) is None


def test_batch_decode_silent_when_small_gemms_sit_beside_large_ones(tmp_path):
    """12 GEMV-shaped calls (120 µs) beside 12 large bf16 GEMMs of m = 4096: the GEMV rows hold under
    half the GEMM time (rules_decode.DECODE_GEMM_SHARE), so this is not a decode step."""
    s = Stream(span=2000)
    big = 2 * D * D * D / (0.7 * BF16_PEAK) * 1e6
    for _ in range(12):
        s.kernel("aten::mm", BF16GEMM, 10.0, [[1, D], [D, D]], [BF16, BF16], gap=20)
        s.kernel("aten::mm", BF16GEMM, big, [[D, D], [D, D]], [BF16, BF16], gap=20)
    a = _analysis(s.write(tmp_path / "mixed.json"))
    assert rules_decode.DECODE_GEMM_SHARE * (120 + 12 * big) > 120
    assert rules_decode.batch_decode(a) is None
    assert rules_decode.quantize_weights(a) is None


def test_batch_decode_silent_on_a_diffusion_transformer(shared_traces):
    """xDiT Flux (TraceLens): its timestep/modulation GEMMs are M = 1, 8 % of the GEMM time."""
    found = list(shared_traces.glob("tracelens/inference/xdit_flux.1_aiter_sage/profile_trace*.json.gz"))
    if not found:
        pytest.skip("the xDiT trace is not in ../shared/traces")
    assert rules_decode.batch_decode(_analysis(found[0])) is None


def test_quantize_weights_saves_half_the_weight_bytes(tmp_path):
    a = _analysis(decode_trace(tmp_path, 1))
    s = RULES_BY_ID["quantize_weights"].run(a)
    # bytes per call (cost model: A, B and C once): weights 4096 × 4096 × 2 B + x and y 2 × 4096 × 2 B;
    # 10 µs per call is 33.57 MB / 10 µs = 3357 GB/s, 70 % of the H200's 4800 GB/s
    weights, io = D * D * 2, 2 * D * 2
    assert 100 * (weights + io) / 10e-6 / BW == pytest.approx(s.evidence[0]["memory_pct"])
    share = weights / (weights + io)
    # int8: the weight part of each call's time halves at the same bandwidth: 12 × 10 × share × (1 − 1/2)
    assert s.saving_us == pytest.approx(12 * 10 * share * 0.5)
    row = s.evidence[0]
    assert row["weight_share"] == pytest.approx(share)
    assert row["int4_time_us"] == pytest.approx(12 * 10 * (1 - share * 0.75))  # 0.5 B per weight
    assert "int8_weight_only" in s.snippet and "bitsandbytes" in s.snippet
    assert "int8/int4" in s.title


@pytest.mark.parametrize("m, dur", [(4096, 10.0), (1, 30.0)])
def test_quantize_weights_silent(tmp_path, m, dur):
    """Compute-bound GEMMs, and GEMVs far below the memory roof (33.6 MB in 30 µs: 23 %)."""
    assert rules_decode.quantize_weights(_analysis(decode_trace(tmp_path, m, dur=dur))) is None
