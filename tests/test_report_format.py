"""Report formatting and chart binning: hand-computed answers for the small pure helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.report.charts import busy_fractions, peaks
from tracekit.units import (
    fmt_bytes,
    fmt_flops,
    fmt_gbps,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_time,
)
from tracekit.report.suggest_view import evidence_table, suggestion_views
from tracekit.report.tables import kernel_table, shapes_text, short_name


@pytest.mark.parametrize(
    ("us", "text"),
    [(0, "0 µs"), (3.14159, "3.14 µs"), (812.4, "812 µs"), (3410.0, "3.41 ms"), (1_200_000, "1.20 s"),
     (None, "–"), (math.nan, "–")],
)
def test_fmt_time(us, text):
    assert fmt_time(us) == text


def test_fmt_units():
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1_234_567) == "1.23 MB"
    assert fmt_flops(137.4e9) == "137 GFLOP"
    assert fmt_gbps(4800) == "4.80 TB/s" and fmt_gbps(830.2) == "830 GB/s"
    assert fmt_pct(0.4213) == "42.1%" and fmt_pct(0.0004) == "<0.1%" and fmt_pct(63.2, fraction=False) == "63.2%"
    assert fmt_int(12345.0) == "12,345"
    assert fmt_ratio(0.0031) == "0.0031" and fmt_ratio(0) == "0" and fmt_ratio(12.345) == "12.3"


def test_busy_fractions_hand_computed():
    # intervals [0,10] and [5,15] merge to [0,15]; [30,35] alone. Bins of 10 µs from 0 to 40.
    edges = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    frac = busy_fractions(np.array([0.0, 5.0, 30.0]), np.array([10.0, 15.0, 35.0]), edges)
    assert frac.tolist() == [1.0, 0.5, 0.0, 0.5]
    assert busy_fractions(np.array([]), np.array([]), edges).tolist() == [0.0] * 4


def test_peaks_accepts_flops_or_tflops():
    roofs, bw = peaks({"peak_tflops": {"bf16": 989.4, "fp32": 67.0}, "memory_gbps": 4800.0})
    assert roofs == {"bf16": 989.4, "fp32": 67.0} and bw == 4800.0
    roofs, bw = peaks({"peaks": {"bf16": 989.4e12, "hbm_bandwidth": 4.8e12}})
    assert roofs == {"bf16": pytest.approx(989.4)} and bw == pytest.approx(4800.0)


def test_shapes_and_short_names():
    assert shapes_text("[1, 768], [768, 2304]") == "1×768, 768×2304"
    assert shapes_text([[1, 768], [], [3]]) == "1×768, (), 3"
    assert shapes_text(None) == "–"
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
    assert short_name(long) == "vectorized_elementwise_kernel"
    assert short_name("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)") == "Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
    assert short_name("<script>alert(1)</script>") == "<script>alert(1)</script>"  # not a C++ name: kept
    assert short_name("Memcpy DtoH (Device -> Pageable)") == "Memcpy DtoH (Device -> Pageable)"
    # a return type before the name, a generic name told apart by its namespace, a C signature
    assert short_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>(cublasGemvParamsEx<int>)") == "gemvx::kernel"
    assert short_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert short_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


def _row(i: int, t: float) -> dict:
    return {"name": f"k{i}", "class": "gemm", "library": "cublas", "op": "aten::mm", "shapes": None,
            "dtype": "bf16", "count": 1, "time_us": t, "flops": None, "bytes": None, "intensity": None,
            "achieved_tflops": None, "achieved_gbps": None, "bound": None, "roofline_pct": None}


def test_kernel_table_caps_rows_and_says_so():
    from tracekit.report import tables

    rows = [_row(i, float(i + 1)) for i in range(tables.MAX_KERNEL_ROWS + 5)]
    t = kernel_table(rows)
    assert len(t.rows) == tables.MAX_KERNEL_ROWS and t.total_rows == tables.MAX_KERNEL_ROWS + 5
    assert t.rows[0][0].text == f"k{tables.MAX_KERNEL_ROWS + 4}"  # longest first
    # the 5 rows left off are the shortest: 1+2+3+4+5 = 15 µs
    assert "the other 5 rows take 15.0 µs" in t.note
    assert [c.key for c in t.columns][:2] == ["name", "class"]


def test_suggestions_ranked_by_saving_and_evidence_formatted():
    views = suggestion_views([
        {"id": "small", "title": "b", "saving_us": 10.0, "saving_pct": 1.0, "formula": "f", "snippet": "x",
         "evidence": []},
        {"id": "big", "title": "a", "saving_us": 2500.0, "saving_pct": 40.0, "formula": "g", "snippet": "y",
         "evidence": [{"kernel": "k", "count": 3, "time_us": 1500.0, "bytes": 2e6}]},
    ])
    assert [v.id for v in views] == ["big", "small"] and [v.rank for v in views] == [1, 2]
    assert views[0].saving == "2.50 ms" and views[0].saving_pct == "40.0%" and views[0].saving_w == 100.0
    assert views[0].columns == ("kernel", "count", "time", "bytes")
    assert views[0].rows == (("k", "3", "1.50 ms", "2.00 MB"),)
    assert views[0].numeric == (False, True, True, True)
    assert suggestion_views([]) == [] and suggestion_views(None) == []
    assert evidence_table(None) == ((), (), (), 0)
