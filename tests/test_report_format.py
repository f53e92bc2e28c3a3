"""Report formatting and chart binning: hand-computed answers for the small pure helpers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tracekit.analyzers.summary import KERNEL_COLUMNS
from tracekit.report.names import demangle, short_name
from tracekit.report.suggest_view import (
    EvidenceCell,
    evidence_table,
    overlap_note,
    suggestion_views,
)
from tracekit.report.tables import fmt_shapes, kernel_table
from tracekit.suggestions.model import Suggestion
from tracekit.units import (
    fmt_bytes,
    fmt_flops,
    fmt_gbps,
    fmt_int,
    fmt_pct,
    fmt_ratio,
    fmt_time,
    fmt_us,
    plural,
)


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


def test_one_formatter_for_text_and_html():
    # issue 10: the CLI and the report print the same text for a duration, ms from 1 ms up
    assert fmt_us(11091.5) == fmt_time(11091.5) == "11.1 ms"
    assert plural(1, "row") == "1 row" and plural(3, "row") == "3 rows" and plural(1234, "launch", "launches") == "1,234 launches"


def test_shapes_and_short_names():
    assert fmt_shapes(((1, 768), (768, 2304))) == "1×768, 768×2304"
    assert fmt_shapes([[1, 768], [], [3]]) == "1×768, (), 3"
    assert fmt_shapes("[1, 768]") == "[1, 768]"  # text is shown as given, never rewritten
    assert fmt_shapes(None) == "–"
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
    assert short_name(long) == "vectorized_elementwise_kernel"
    assert short_name("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)") == "Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
    assert short_name("<script>alert(1)</script>") == "<script>alert(1)</script>"  # not a C++ name: kept
    assert short_name("Memcpy DtoH (Device -> Pageable)") == "Memcpy DtoH (Device -> Pageable)"
    # a return type before the name, a generic name told apart by its namespace, a C signature
    assert short_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>(cublasGemvParamsEx<int>)") == "gemvx::kernel"
    assert short_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert short_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


def test_demangle_itanium_names():
    # HIP traces keep mangled names; hand-demangled with the Itanium ABI rules
    assert demangle("_Z17vector_add_kernelPfS_S_i") == "vector_add_kernel(…)"
    assert demangle("_ZN2at6native4gemmIfEEvPf") == "at::native::gemm<…>(…)"
    assert demangle("_ZN7rocprim6detail11scan_kernelILb1ENS0_19wrapped_scan_configINS_14default_configEiEEPiS5_EEvT0_") == "rocprim::detail::scan_kernel<…>(…)"
    assert demangle("_ZNK3foo3barEv") == "foo::bar(…)"  # const member function
    # TraceLens SGLang / MI300X kernels, demangled by hand: DF16b is std::bfloat16_t (a builtin, not a
    # 16-character name); J...E an argument pack; F...E a function type; L_Z...E the address of a function
    aiter = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
    assert demangle(aiter) == "aiter::add_rmsnorm_quant_kernel<…>(…)"
    sgl = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
    assert demangle(sgl) == "sgl_hip::activation::act_and_mul_kernel<…>(…)"
    # a CK name the profiler cut short (1,611 characters in the MI300X ResNet trace), cut here too;
    # LNS1_18GemmSpecializationE7E is an enum literal, _GLOBAL__N_1 the anonymous namespace
    ck = ("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_34GridwiseGemm"
          "MultiD_xdl_cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorENS_5TupleIJEEES7_DF16bDF16bf"
          "DF16bSA_DF16bNS0_12element_wise11PassThroughESC_SC_LNS1_18GemmSpecializationE7ELi256ELi128E")
    assert demangle(ck) == "ck::tensor_operation::device::(anonymous namespace)::kernel_grouped_conv_fwd_xdl_cshuffle_v3<…>(…)"
    assert short_name("_ZN2at6native4gemmIfEEvPf") == "gemm"
    assert demangle("triton_poi_fused_0") == "triton_poi_fused_0" and demangle("_Zoops") == "_Zoops"


def _row(i: int, t: float) -> dict:
    return {"name": f"k{i}", "class": "gemm", "library": "cublas", "op": "aten::mm", "shapes": None,
            "dtype": "bf16", "count": 1, "time_us": t, "flops": None, "bytes": None, "intensity": None,
            "achieved_tflops": None, "achieved_gbps": None, "bound": None, "roofline_pct": None}


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS))


def test_kernel_table_caps_rows_and_says_so():
    from tracekit.report import tables

    rows = [_row(i, float(i + 1)) for i in range(tables.MAX_KERNEL_ROWS + 5)]
    t = kernel_table(_frame(rows))
    assert len(t.rows) == tables.MAX_KERNEL_ROWS and t.total_rows == tables.MAX_KERNEL_ROWS + 5
    assert t.rows[0][0].text == f"k{tables.MAX_KERNEL_ROWS + 4}"  # longest first
    # the 5 rows left off are the shortest: 1+2+3+4+5 = 15 µs
    assert "the other 5 take 15.0 µs" in t.note
    assert [c.key for c in t.columns][:2] == ["name", "class"]


def _sugg(id_: str, saving: float, evidence: tuple = ()) -> Suggestion:
    return Suggestion(id=id_, title=id_, saving_us=saving, saving_pct=saving / 100, formula="f", snippet="x",
                      evidence=evidence)


LONG = ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, false, 9, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, float> >(cublasGemvParamsEx<int> )")


def test_suggestions_ranked_by_saving_and_evidence_formatted():
    views = suggestion_views([
        _sugg("small", 10.0),
        _sugg("big", 2500.0, ({"kernel": "k", "count": 3, "time_us": 1500.0, "bytes": 2e6},)),
    ])
    assert [v.id for v in views] == ["big", "small"] and [v.rank for v in views] == [1, 2]
    assert views[0].saving == "2.50 ms" and views[0].saving_pct == "25.0%" and views[0].saving_w == 100.0
    assert views[0].columns == ("kernel", "count", "time", "bytes")
    assert [c.text for c in views[0].rows[0]] == ["k", "3", "1.50 ms", "2.00 MB"]
    assert views[0].numeric == (False, True, True, True)
    assert suggestion_views([]) == [] and suggestion_views(None) == []
    assert evidence_table(()) == ((), (), (), 0)
    assert overlap_note(views) and not overlap_note(views[:1])


def test_evidence_names_short_numbers_first():
    cols, numeric, rows, _ = evidence_table([{"op": "aten::addmm", "kernel": LONG, "count": 240, "time_us": 1648.8}])
    assert cols == ("kernel", "count", "time", "op")  # the name, then the numbers, then other text
    assert numeric == (False, True, True, False)
    assert rows[0][0] == EvidenceCell("gemvx::kernel", LONG)  # the full name on hover (under the 300-character cap)
