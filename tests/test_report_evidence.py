"""Evidence rows the report shows: the dtype of a fusion chain is its tensors', not a Python scalar's."""

from __future__ import annotations

from test_suggestions_kernels import EW, F32, N, Stream, _analysis

from tracekit.suggestions import rules_kernels

ROW = [1, 1, N]


def test_fusion_dtype_ignores_python_scalars(tmp_path):
    # GELU's tanh form on fp32 activations: x * 0.5 and x + 0.044715 take Python numbers, which the
    # profiler records as 0-dim 'double' inputs; torch computes these in fp32 (type promotion: a
    # dimensioned tensor decides), so the chain is fp32 and each intermediate is N * 4 bytes.
    s = Stream()
    s.kernel("aten::mul", EW.format("mul"), 50, [ROW, []], [F32, "double"])
    s.kernel("aten::pow", EW.format("pow"), 50, [ROW, []], [F32, "double"])
    s.kernel("aten::add", EW.format("add"), 50, [ROW, ROW, []], [F32, F32, "double"])
    row = rules_kernels.fuse_elementwise(_analysis(s.write(tmp_path / "gelu.json"))).evidence[0]
    assert row["ops"] == "aten::mul → aten::pow → aten::add"
    assert row["dtype"] == "fp32"
    assert row["avoided_bytes"] == 2 * 2 * N * 4  # two intermediates, written once and read once, 4 bytes each
