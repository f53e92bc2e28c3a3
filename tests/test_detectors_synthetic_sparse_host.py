"""sparse_products and host_reductions on hand-made traces (tests/tracebuilder.py), every expected number
written into the trace by hand; and malformed arguments in the same places, which must give no row and no
failure."""

from __future__ import annotations

from pathlib import Path

from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import host_reductions as hr
from tracekit.analyzers.detectors import sparse_products as sp
from tracekit.pipeline.local import analyse_file

SPARSE_DIMS = [[1000, 64], [1000, 1000], [1000, 64], [], []]
SPARSE_STRIDES = [[64, 1], [], [64, 1], [], []]
FLOAT3 = ["float", "float", "float", "Scalar", "Scalar"]


def _step(b: TraceBuilder, t0: float, n: int, *, good: bool = True) -> None:
    """One ProfilerStep: a COO product (a coalesce of 50 µs, a transpose copy of 20 µs, the SpMM of 100 µs)
    and a 64 MiB device-to-host copy of 2,000 µs then a host topk of 3,000 µs on the copied [16, 1048576]."""
    b.annotation(f"ProfilerStep#{n}", t0, 10_000)
    mm = b.op("aten::_sparse_mm", t0 + 10, 400, **{"Input Dims": [[1000, 1000], [1000, 64]],
                                                 "Input Strides": [[], [64, 1]], "Input type": ["float", "float"]})
    add = b.op("aten::addmm", t0 + 20, 380, **{"Input Dims": SPARSE_DIMS if good else "bogus",
                                              "Input Strides": SPARSE_STRIDES, "Input type": FLOAT3})
    co = b.op("aten::_coalesce", t0 + 30, 100, **{"Input Dims": [[1000, 1000]], "Input Strides": [[]], "Input type": ["float"]})
    b.op("aten::_sparse_coo_tensor_with_dims_and_tensors", t0 + 100, 20,
         **{"Input Dims": [[], [], [], [2, 5000], [5000]] if good else [[], [], [], "x", 5000],
            "Input type": ["Scalar", "Scalar", "ScalarList", "long int", "float"]})
    b.launch(t0 + 40, 5, "void at::native::coalesceValuesKernel<float>", t0 + 500, 50, ext=co)
    cp = b.op("aten::copy_", t0 + 200, 30, **{"Input Dims": [[64, 1000], [64, 1000], []], "Input type": ["float", "float", "Scalar"]})
    b.launch(t0 + 210, 5, "void at::native::elementwise_kernel<128, 2>", t0 + 560, 20, ext=cp)
    b.launch(t0 + 300, 5, "void cusparse::csrmm_alg1_kernel<float>", t0 + 600, 100, ext=add)
    assert mm < add < co
    to = b.op("aten::to", t0 + 1000, 2100, **{"Input Dims": [[16, 1048576], [], [], [], []] if good else {"a": 1},
                                            "Input type": ["float", "Scalar", "Scalar", "Scalar", ""]})
    b.launch(t0 + 1010, 2050, "Memcpy DtoH (Device -> Pageable)", t0 + 1020, 2000, ext=to, api="cudaMemcpyAsync",
             kind="memcpy", bytes=64 << 20)
    b.op("aten::topk", t0 + 3200, 3000, **{"Input Dims": [[16, 1048576], [], [], [], []], "Input type": ["float"] + [""] * 4})


def _trace(tmp_path: Path, good: bool) -> Path:
    b = TraceBuilder()
    for n in range(4):
        _step(b, 1_000 + n * 10_000, n + 1, good=good)
    return b.write(tmp_path / ("good.json" if good else "bad.json"))


def test_sparse_product_and_host_reduction_by_hand(tmp_path):
    """Per step: one product of a 1000 × 1000 COO matrix (5,000 stored entries) by a dense 1000 × 64, its
    parts 100 µs SpMM, 50 µs coalesce, 20 µs layout; one 64 MiB copy (2,000 µs) reduced by a host topk of
    3,000 µs on the copied shape."""
    patterns = analyse_file(_trace(tmp_path, True)).analysis.ranks[0].patterns
    products = patterns.sparse_products
    assert len(products) >= 3
    row = products.iloc[-1]
    assert (row[sp.SP_M], row[sp.SP_K], row[sp.SP_N], row[sp.SP_NNZ]) == (1000, 1000, 64, 5000)
    assert (row[sp.SP_SPMM_US], row[sp.SP_COALESCE_US], row[sp.SP_LAYOUT_US]) == (100.0, 50.0, 20.0)
    assert bool(row[sp.SP_COALESCED]) is True
    reductions = patterns.host_reductions
    assert len(reductions) >= 3
    last = reductions.iloc[-1]
    assert (last[hr.HR_OP], last[hr.HR_SHAPE], last[hr.HR_BYTES]) == ("aten::topk", "16×1048576", float(64 << 20))
    assert (last[hr.HR_COPY_US], last[hr.HR_HOST_US]) == (2000.0, 3000.0)


def test_malformed_arguments_give_no_rows_and_no_failure(tmp_path):
    """The same trace with the product's and the copy's Input Dims as a string, a dict and a list with a
    string in it: nothing to read there, so no row, and the analysis records no failure."""
    rank = analyse_file(_trace(tmp_path, False)).analysis.ranks[0]
    assert not rank.failures
    assert not len(rank.patterns.host_reductions)
    assert not len(rank.patterns.sparse_products) or (rank.patterns.sparse_products[sp.SP_NNZ] == 0).all()
