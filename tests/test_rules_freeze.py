"""Rule freeze_params (gradients accumulated into tensors no optimizer updates) on a synthetic trace with hand-derived numbers and on the sixth held-out set's pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import frozen_grads as fg
from tracekit.suggestions.rules import RULES_BY_ID

KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >"
ACC = "torch::autograd::AccumulateGrad"


def frozen_trace(tmp_path: Path, *, interleaved: bool = False, frozen: int = 4, steps: int = 4) -> Path:
    """Per step (t0): on the backward thread (tid 200), the head's gradient accumulated (AccumulateGrad
    of [8]) at t0+10, then 2 launches of 100 µs kernels (the backbone's backward) at t0+20 and t0+40,
    then `frozen` accumulations of [4, 4] from t0+300 (with `interleaved`, the head's accumulation comes
    last instead); then on the main thread `aten::_fused_adamw_` over the head's tensor ([8]) at t0+400
    (one 20 µs kernel)."""
    b = TraceBuilder()
    for step in range(1, steps + 1):
        t0 = (step - 1) * 600.0
        b.annotation(f"ProfilerStep#{step}", t0, 600.0)
        head_at = t0 + 350 if interleaved else t0 + 10
        b.op(ACC, head_at, 5, tid=200, **{"Input Dims": [[8]]})
        for i, at in enumerate((t0 + 20, t0 + 40)):
            b.launch(at, 5, KERNEL, t0 + 100 + 100 * i, 100.0, tid=200)
        for k in range(frozen):
            b.op(ACC, t0 + 300 + 10 * k, 5, tid=200, **{"Input Dims": [[4, 4]]})
        ext = b.op("aten::_fused_adamw_", t0 + 400, 10, **{"Input Dims": [[[8]], [[8]], [[8]], [[8]], [], [[]]]})
        b.launch(t0 + 402, 5, KERNEL, t0 + 410, 20.0, ext=ext)
    return b.write(tmp_path / "frozen.json")


def test_prices_backward_past_the_last_trained_gradient(tmp_path):
    a = analyze(tracekit.load_trace(frozen_trace(tmp_path)))
    t = a.ranks[0].patterns.frozen_grads
    assert t[fg.FG_ACCUMULATED].tolist() == [5] * 4 and t[fg.FG_UNREAD].tolist() == [4] * 4
    # by hand: the 2 kernels launched after the head's accumulation (t0+10) and before the last one
    # (t0+330): 2 × 100 µs per step
    assert t[fg.FG_CUT_US].tolist() == [pytest.approx(200.0)] * 4
    s = RULES_BY_ID["freeze_params"].run(a)
    assert s is not None and s.saving_us == pytest.approx(4 * 200.0)
    assert "requires_grad_(False)" in s.snippet


@pytest.mark.parametrize("kw", [{"interleaved": True}, {"frozen": 3}])
def test_silent_when_interleaved_or_few(tmp_path, kw):
    a = analyze(tracekit.load_trace(frozen_trace(tmp_path, **kw)))
    assert RULES_BY_ID["freeze_params"].run(a) is None


HELDOUT6 = Path(__file__).resolve().parent.parent / "sample_traces" / "heldout6"


def test_heldout6_frozen_backbone_pair() -> None:
    """H100 heldout6 frozen_backbone (a classifier head trained on a 12-layer encoder left requiring grad):
    measured unprofiled (the traces' bare steps) 29.18 → 10.41 ms with `requires_grad_(False)`, an 18.77 ms
    saving (sample_traces/heldout6/README.md). From the raw events per step: 146 AccumulateGrad calls, the
    first two of the head's shapes ([1000, 1024], [1000]) and the fused AdamW's list holds those two."""
    before = analysed_file(HELDOUT6 / "ho6_frozen_backbone.trace.json.gz")
    s = before.suggestions[0]
    assert s.id == "freeze_params"
    e = s.evidence[0]
    assert (e["accumulated"], e["updated"], e["unread"]) == (146, 2, 144)
    assert abs(s.per_step_us - 18_770) / 18_770 < 0.35
    after = analysed_file(HELDOUT6 / "ho6_frozen_backbone_freeze.trace.json.gz")
    assert all(x.id != "freeze_params" for x in after.suggestions)
