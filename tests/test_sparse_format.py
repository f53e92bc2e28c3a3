"""sparse_format: sparse × dense products that coalesce a COO operand at every call, or whose operand is
dense enough for a GEMM (analyzers/detectors/sparse_products.py, suggestions/rules_sparse.py), on
hand-made argument lists and on two held-out pairs (H100), against the raw events and the recordings'
own unprofiled steps."""

from __future__ import annotations

import math

import pytest
from recorded import bare_ms, profiler_steps, raw_events, recording
from shared_analysis import analysed_file

from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.models import op_cost
from tracekit.analyzers.detectors import sparse_products as sp
from tracekit.analyzers.detectors.sparse_products import _operands
from tracekit.compare.applied import applied
from tracekit.suggestions.rules_sparse import targets

COO = ("heldout25", "ho25_copurchase_gcn_uncoalesced_coo", "ho25_copurchase_gcn_uncoalesced_coo_csr_adjacency")
DENSE = ("heldout16", "ho16_gcn_sparse_dense_graph", "ho16_gcn_sparse_dense_graph_dense_adj")
ADDMM_DIMS = [[524288, 128], [524288, 524288], [524288, 128], [], []]
ADDMM_STRIDES = [[128, 1], [], [128, 1], [], []]
ADDMM_TYPES = ["float", "float", "float", "Scalar", "Scalar"]


@pytest.mark.parametrize(("dims", "strides", "types", "expected"), [
    (ADDMM_DIMS, ADDMM_STRIDES, ADDMM_TYPES, (524288, 524288, 128, "fp32", 4.0)),  # addmm(out, sparse, dense)
    ([[8192, 8192], [8192, 64]], [[], [64, 1]], ["float", "float"], (8192, 8192, 64, "fp32", 4.0)),  # _sparse_mm
    ([[8192, 8192], [8192, 64]], [[8192, 1], [64, 1]], ["float", "float"], None),  # both dense: no sparse operand
    ([[8192, 8192], [4096, 64]], [[], [64, 1]], ["float", "float"], None),  # no dense operand with K rows
    ([[8192, 8192], [8192, 64]], [[], [64, 1]], ["float", "c10::Bogus"], None),  # unknown dtype
    ("[[8192, 8192]]", [[]], ["float"], None),  # untrusted text, not a list
])
def test_operands(dims, strides, types, expected):
    """The sparse M×K operand is the 2-D input with empty recorded strides, the dense K×N one the next
    strided input with K rows: by hand for each case."""
    assert _operands(dims, strides, types) == expected


def test_a_sparse_operand_gets_no_dense_flops():
    """A dense model priced addmm(out, a 524,288² sparse matrix, dense) at 2·M·N·K = 70 TFLOP per call, shown
    as 12,515 TFLOP/s on an H100; with the sparse operand's empty strides it is unknown. The same call with
    dense strides keeps 2·524288·128·524288 FLOPs."""
    assert op_cost("aten::addmm", ADDMM_DIMS, ADDMM_TYPES, ADDMM_STRIDES) is None
    dense = op_cost("aten::addmm", ADDMM_DIMS, ADDMM_TYPES, [[128, 1], [524288, 1], [128, 1], [], []])
    assert dense is not None and dense.flops == 2.0 * 524288 * 128 * 524288


def _coalesce_kernels(events: list[dict], lo: float, hi: float) -> float:
    """GPU µs (kernels and copies) of one step whose op (joined by External id) runs inside an
    `aten::_coalesce` span of the same thread, from the raw events."""
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in ops if e["name"] == "aten::_coalesce" and lo <= e["ts"] < hi]
    by_id = {e["args"]["External id"]: e for e in ops if "External id" in e.get("args", {})}
    spent = 0.0
    for k in (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
        op = by_id.get(k["args"].get("External id"))
        if op is not None and any(t == op["tid"] and a <= op["ts"] < b for t, a, b in spans):
            spent += k["dur"]
    return spent


def test_coo_products_coalesced_every_call_priced_as_csr_once():
    """copurchase_gcn_uncoalesced_coo: three `torch.sparse.mm(adj, h @ w)` a step on a 524,288-node COO
    adjacency; each coalesces it (the raw events' `_sparse_coo_tensor_with_dims_and_tensors` builds a
    [2, 8,912,762] index tensor) and the coalesce's kernels and copies per step match the raw events' sum. The cuSPARSE
    kernels get no FLOPs. Priced as CSR once: each product's CSR SpMM at the H100's 3,350 GB/s, 8,912,762 ×
    (N·4 + 4 + 4) + 524,288·N·4 bytes (N = 128, 128, 47: 1.459 + 1.459 + 0.553 ms), the coalesces and
    transposes gone: first, within ±35 % of the bare saving (34.5 → 6.35 ms: 28.1 ms), silent on the CSR
    recording, where `diff` sees no coalescing product any more."""
    folder, name, fixed_name = COO
    before, after = recording(folder, name), recording(folder, fixed_name)
    events = raw_events(before)
    built = {tuple(e["args"]["Input Dims"][3]) for e in events
             if e.get("name") == "aten::_sparse_coo_tensor_with_dims_and_tensors"}
    assert built == {(2, 8_912_762)}
    found = analysed_file(before)
    rank = found.analysis.ranks[0]
    table = rank.patterns.sparse_products
    windows = profiler_steps(events)
    per_step = table.groupby(sp.SP_STEP)[sp.SP_COALESCE_US].sum().tolist()
    assert len(per_step) == len(windows) == 4  # every recorded step is steady
    for (lo, hi), spent in zip(windows, per_step, strict=True):
        assert spent == pytest.approx(_coalesce_kernels(events, lo, hi), rel=1e-6)
    assert set(table[sp.SP_NNZ]) == {8_912_762} and table[sp.SP_COALESCED].all()
    csr, _ = targets(table.head(3), rank.roofline.device)
    by_hand = [(8_912_762 * (n * 4 + 8) + 524_288 * n * 4) / 3350e9 * 1e6 for n in (128, 128, 47)]
    assert csr.tolist() == pytest.approx(by_hand, rel=1e-9)
    spmm = rank.classification.table["library"] == "cusparse"
    assert rank.costs.table[attribution.FLOPS][spmm].isna().all()
    first = found.suggestions[0]
    assert first.id == "sparse_format" and first.evidence[0]["change"] == "csr"
    assert first.per_step_us / 1000 == pytest.approx(bare_ms(before) - bare_ms(after), rel=0.35)
    fixed = analysed_file(after)
    assert "sparse_format" not in {s.id for s in fixed.suggestions}
    assert applied("sparse_format", found.analysis, fixed.analysis).applied is True


def test_a_tenth_dense_matrix_priced_as_one_gemm():
    """gcn_sparse_dense_graph: an 8,192-node adjacency with 6,296,786 stored entries (9.4 %: the raw
    events' [2, 6296786] index tensors), 6 products a step (N = 256 × 4, 64 × 2). A dense GEMM at the
    H100's fp32 roof (66.9 TFLOP/s: 2·8192²·256 FLOPs = 0.514 ms) beats the CSR roof (1.94 ms), so the rule
    says dense: first, within ±35 % of the bare saving with the dense adjacency (45.6 → 3.6 ms)."""
    folder, name, fixed_name = DENSE
    before, after = recording(folder, name), recording(folder, fixed_name)
    built = {tuple(e["args"]["Input Dims"][3]) for e in raw_events(before)
             if e.get("name") == "aten::_sparse_coo_tensor_with_dims_and_tensors"}
    assert built == {(2, 6_296_786)}
    found = analysed_file(before)
    rank = found.analysis.ranks[0]
    table = rank.patterns.sparse_products
    csr, dense = targets(table, rank.roofline.device)
    wide = (table[sp.SP_N] == 256).to_numpy()
    assert dense[wide] == pytest.approx(2 * 8192**2 * 256 / 66.9e12 * 1e6, rel=1e-9)
    assert csr[wide] == pytest.approx((6_296_786 * (256 * 4 + 8) + 8192 * 256 * 4) / 3350e9 * 1e6, rel=1e-9)
    first = found.suggestions[0]
    assert first.id == "sparse_format" and first.evidence[0]["change"] == "dense"
    assert first.evidence[0]["density"] == pytest.approx(6_296_786 / 8192**2)
    assert first.per_step_us / 1000 == pytest.approx(bare_ms(before) - bare_ms(after), rel=0.35)
    assert "sparse_format" not in {s.id for s in analysed_file(after).suggestions}
    assert not math.isnan(bare_ms(after))
