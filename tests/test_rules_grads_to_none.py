"""Rule grads_to_none (gradients zeroed by zero_grad(set_to_none=False), then accumulated into) on synthetic traces with hand-derived numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import zeroed_grads as zg
from tracekit.suggestions.rules import RULES_BY_ID

ZERO_KERNEL = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<ZeroFunctor<float> >"
ADD_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >"
ACC = "torch::autograd::AccumulateGrad"
SHAPES = [[64, 64], [64], [64, 64], [64]]


def zeroed_trace(tmp_path: Path, *, zeroing: str = "foreach", micro_batches: int = 2, steps: int = 4) -> Path:
    """Per step (t0 = 1000 µs × step): `Optimizer.zero_grad#AdamW.zero_grad` on the main thread at t0+10
    for 30 µs; inside it (zeroing="foreach") one `aten::_foreach_zero_` over the 4 SHAPES launching one
    40 µs kernel, or ("per_tensor") 4 `aten::zero_` launching a 10 µs kernel each, or ("none") nothing
    (set_to_none=True). Then `micro_batches` backwards on thread 200, each accumulating the 4 gradients
    (AccumulateGrad → aten::add_, one 10 µs kernel each); then a fused AdamW step (one 20 µs kernel)."""
    b = TraceBuilder()
    for step in range(1, steps + 1):
        t0 = step * 1000.0
        b.annotation(f"ProfilerStep#{step}", t0, 1000.0)
        b.annotation("Optimizer.zero_grad#AdamW.zero_grad", t0 + 10, 30.0)
        if zeroing == "foreach":
            ext = b.op("aten::_foreach_zero_", t0 + 12, 20, **{"Input Dims": [SHAPES]})
            b.launch(t0 + 14, 5, ZERO_KERNEL, t0 + 50, 40.0, ext=ext)
        elif zeroing == "per_tensor":
            for k, shape in enumerate(SHAPES):
                ext = b.op("aten::zero_", t0 + 12 + 6 * k, 5, **{"Input Dims": [shape]})
                b.launch(t0 + 13 + 6 * k, 2, ADD_KERNEL.replace("add", "fill"), t0 + 50 + 12 * k, 10.0, ext=ext)
        for m in range(micro_batches):
            for k, shape in enumerate(SHAPES):
                at = t0 + 200 + 200 * m + 40 * k
                b.op(ACC, at, 30, tid=200, **{"Input Dims": [shape]})
                ext = b.op("aten::add_", at + 2, 20, tid=200, **{"Input Dims": [shape, shape, []]})
                b.launch(at + 4, 5, ADD_KERNEL, at + 10, 10.0, ext=ext, tid=200)
        ext = b.op("aten::_fused_adamw_", t0 + 700, 10, **{"Input Dims": [SHAPES] * 4 + [[], [[]]]})
        b.launch(t0 + 702, 5, "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", t0 + 710, 20.0, ext=ext)
    return b.write(tmp_path / "zeroed.json")


@pytest.mark.parametrize(("zeroing", "zero_us"), [("foreach", 40.0), ("per_tensor", 40.0)])
def test_prices_the_zeroing_and_the_first_accumulations(tmp_path, zeroing, zero_us):
    a = analyze(tracekit.load_trace(zeroed_trace(tmp_path, zeroing=zeroing)))
    t = a.ranks[0].patterns.zeroed_grads
    # by hand: 4 gradients zeroed per step (the _foreach_zero_'s list of 4, or 4 zero_ calls); of the 8
    # accumulations per step (2 micro-batches × 4) only the first 4 add into zeros: 4 × 10 µs
    assert t[zg.ZG_ZEROED].tolist() == [4] * 4 and t[zg.ZG_ADDS].tolist() == [4] * 4
    assert t[zg.ZG_ZERO_GPU_US].tolist() == [pytest.approx(zero_us)] * 4
    assert t[zg.ZG_ADD_GPU_US].tolist() == [pytest.approx(40.0)] * 4
    calls = a.ranks[0].patterns.zeroed_grad_calls
    assert int(calls.sum()) == 4 * ((1 if zeroing == "foreach" else 4) + 4)
    s = RULES_BY_ID["grads_to_none"].run(a)
    assert s is not None and s.saving_us == pytest.approx(4 * (zero_us + 40.0))
    assert "set_to_none=True" in s.snippet and "4 gradients" in s.title


def test_silent_when_gradients_are_freed(tmp_path):
    a = analyze(tracekit.load_trace(zeroed_trace(tmp_path, zeroing="none")))
    assert not len(a.ranks[0].patterns.zeroed_grads)
    assert RULES_BY_ID["grads_to_none"].run(a) is None
