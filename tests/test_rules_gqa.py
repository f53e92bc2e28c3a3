"""Rule enable_gqa (grouped-query attention fed K/V expanded to every query head) on a synthetic trace with hand-derived numbers and on the sixth held-out set's pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import gqa_expand as gq
from tracekit.suggestions.rules import RULES_BY_ID

COPY = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda>"
ATTN = "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 128, 4>>"
COPY_US, ATTN_US = 30.0, 40.0


def gqa_trace(tmp_path: Path, *, queries: int = 1, enable: bool = False, steps: int = 4) -> Path:
    """Per step: K and V of 2 heads (B 2, S 100, D 64) each repeat_interleave'd 4× along dim 1 (an
    aten::copy_ of the [2, 2, 4, 100, 64] expanded view inside, one COPY_US kernel), then one SDPA call
    with q [2, 8, queries, 64] and k, v [2, 8, 100, 64] (one ATTN_US kernel); with `enable`, the call
    says enable_gqa=True."""
    b = TraceBuilder()
    period = 400.0
    kv = [2, 2, 100, 64]
    for step in range(1, steps + 1):
        t0 = (step - 1) * period
        b.annotation(f"ProfilerStep#{step}", t0, period)
        gpu = t0 + 20
        t = t0 + 10
        for _ in range(2):
            b.op("aten::repeat_interleave", t, 20, **{"Input Dims": [kv, [], [], []],
                                                     "Concrete Inputs": ["", "4", "1", ""]})
            ext = b.op("aten::copy_", t + 5, 10, **{"Input Dims": [[2, 2, 4, 100, 64], [2, 2, 4, 100, 64]]})
            b.launch(t + 7, 3, COPY, gpu, COPY_US, ext=ext)
            gpu += COPY_US + 1
            t += 25
        concrete = ["", "", "", "", "0.", "False", "", "True" if enable else "False"]
        b.op("aten::scaled_dot_product_attention", t, 20, **{
            "Input Dims": [[2, 8, queries, 64], [2, 8, 100, 64], [2, 8, 100, 64], [], [], [], [], []],
            "Concrete Inputs": concrete})
        ext = b.op("aten::_flash_attention_forward", t + 5, 10)
        b.launch(t + 7, 3, ATTN, gpu, ATTN_US, ext=ext)
    return b.write(tmp_path / "gqa.json")


def test_decode_saves_the_copies_and_three_quarters_of_attention(tmp_path):
    a = analyze(tracekit.load_trace(gqa_trace(tmp_path)))
    table = a.ranks[0].patterns.gqa_expand
    assert len(table) == 4  # one row per step
    assert table[gq.GQ_COPIES].tolist() == [2] * 4 and table[gq.GQ_GROUP].tolist() == [4] * 4
    assert table[gq.GQ_COPY_US].tolist() == [pytest.approx(2 * COPY_US)] * 4
    assert table[gq.GQ_ATTN_US].tolist() == [pytest.approx(ATTN_US)] * 4
    s = RULES_BY_ID["enable_gqa"].run(a)
    assert s is not None
    # by hand, per step: 2 copies × 30 µs + 40 µs × (1 − 1/4) = 90 µs
    assert s.saving_us == pytest.approx(90.0 * len(table))
    assert "enable_gqa=True" in s.snippet


def test_prefill_saves_the_copies_only(tmp_path):
    a = analyze(tracekit.load_trace(gqa_trace(tmp_path, queries=100)))
    s = RULES_BY_ID["enable_gqa"].run(a)
    assert s is not None and s.saving_us == pytest.approx(2 * COPY_US * 4)  # FLOP-bound attention unchanged


def test_silent_when_sdpa_already_groups(tmp_path):
    a = analyze(tracekit.load_trace(gqa_trace(tmp_path, enable=True)))
    assert not len(a.ranks[0].patterns.gqa_expand)
    assert RULES_BY_ID["enable_gqa"].run(a) is None


HELDOUT6 = Path(__file__).resolve().parent.parent / "sample_traces" / "heldout6"


def test_heldout6_gqa_repeat_pair() -> None:
    """H100 heldout6 gqa_repeat (batch-16 decode, 32 query heads on 8 K/V heads, a ~4,100-position cache
    repeat_interleave'd 4× per layer per token): measured unprofiled (the traces' bare steps) 106.72 →
    22.12 ms with enable_gqa=True, an 84.60 ms saving (sample_traces/heldout6/README.md). From the raw
    events per steady step: 128 expansion copies (72.1 ms) and 64 cuDNN attention kernels (23.2 ms)."""
    before = analysed_file(HELDOUT6 / "ho6_gqa_repeat.trace.json.gz")
    s = before.suggestions[0]
    assert s.id == "enable_gqa"
    e = s.evidence[0]
    assert (e["group"], e["queries"], e["calls_per_step"]) == (4, 1, 64.0)
    assert abs(e["copy_us_per_step"] - 72_000) < 500 and abs(e["attention_us_per_step"] - 23_200) < 100
    assert abs(s.per_step_us - 84_600) / 84_600 < 0.35
    after = analysed_file(HELDOUT6 / "ho6_gqa_repeat_enable_gqa.trace.json.gz")
    assert all(x.id != "enable_gqa" for x in after.suggestions)
