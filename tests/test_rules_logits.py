"""Rule last_logits (prefill logits of every position read at the last one) on a synthetic trace with hand-derived numbers and on the sixth held-out set's pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import full_logits as fl
from tracekit.suggestions.rules import RULES_BY_ID

GEMM = "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_TNT"
CAST = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>"
B, S, V, K = 4, 64, 32_000, 32
GEMM_US, CAST_US = 100.0, 50.0


def logits_trace(tmp_path: Path, *, index: str = "-1", training: bool = False, steps: int = 4) -> Path:
    """Per step: the head `aten::mm` of [B·S, K] × [K, V] (one GEMM_US kernel), the cast of the [B, S, V]
    logits (`aten::to`, one CAST_US kernel), then `aten::select(logits, 1, index)`; with `training`,
    an autograd node after it."""
    b = TraceBuilder()
    for step in range(1, steps + 1):
        t0 = (step - 1) * 400.0
        b.annotation(f"ProfilerStep#{step}", t0, 400.0)
        ext = b.op("aten::mm", t0 + 10, 10, **{"Input Dims": [[B * S, K], [K, V]]})
        b.launch(t0 + 12, 3, GEMM, t0 + 20, GEMM_US, ext=ext)
        ext = b.op("aten::to", t0 + 30, 10, **{"Input Dims": [[B, S, V], [], [], [], []]})
        b.launch(t0 + 32, 3, CAST, t0 + 125, CAST_US, ext=ext)
        b.op("aten::select", t0 + 50, 5, **{"Input Dims": [[B, S, V], [], []], "Concrete Inputs": ["", "1", index]})
        if training:
            b.op("autograd::engine::evaluate_function: MmBackward0", t0 + 60, 5)
    return b.write(tmp_path / "logits.json")


def test_the_projection_and_cast_at_one_position_in_s(tmp_path):
    a = analyze(tracekit.load_trace(logits_trace(tmp_path)))
    table = a.ranks[0].patterns.full_logits
    assert table[fl.FL_GEMM_US].tolist() == [GEMM_US] * 4 and table[fl.FL_OTHER_US].tolist() == [CAST_US] * 4
    s = RULES_BY_ID["last_logits"].run(a)
    assert s is not None
    # by hand, per step: (100 + 50) µs × (1 − 1/64) = 147.65625 µs
    assert s.saving_us == pytest.approx(4 * 150.0 * (1 - 1 / S))
    assert "logits_to_keep=1" in s.snippet


@pytest.mark.parametrize("kw", [{"index": "0"}, {"training": True}])
def test_silent_on_the_first_position_or_in_training(tmp_path, kw):
    a = analyze(tracekit.load_trace(logits_trace(tmp_path, **kw)))
    assert RULES_BY_ID["last_logits"].run(a) is None


HELDOUT6 = Path(__file__).resolve().parent.parent / "sample_traces" / "heldout6"


def test_heldout6_prefill_logits_pair() -> None:
    """H100 heldout6 prefill_logits (8 prompts of 2,048 tokens, vocab 151,936, logits upcast to float32
    whole, then `[:, -1]`): measured unprofiled (the traces' bare steps) 47.78 → 24.97 ms projecting the
    last position alone, a 22.82 ms saving (sample_traces/heldout6/README.md). From the raw events per
    steady step: the head GEMM (~13.0 ms) and the float32 cast of [8, 2048, 151936] (~8.1 ms)."""
    before = analysed_file(HELDOUT6 / "ho6_prefill_logits.trace.json.gz")
    s = before.suggestions[0]
    assert s.id == "last_logits"
    e = s.evidence[0]
    assert (e["logits"], e["positions"]) == ("[8, 2048, 151936]", 2048)
    assert abs(e["projection_us_per_step"] - 13_000) < 400 and abs(e["other_us_per_step"] - 8_100) < 300
    assert abs(s.per_step_us - 22_820) / 22_820 < 0.35
    after = analysed_file(HELDOUT6 / "ho6_prefill_logits_last_only.trace.json.gz")
    assert all(x.id != "last_logits" for x in after.suggestions)
