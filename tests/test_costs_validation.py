"""Estimated bytes against ncu's DRAM counters on the H200 (docs/validation.md, run B)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers.costs.attribution import BYTES, estimate_costs
from tracekit.analyzers.kernels import classify

MEASURED = Path(__file__).resolve().parents[1] / "docs" / "measurements"

# cases whose kernels read their data once: the estimate must be within ±30 % of DRAM traffic
WITHIN = {
    "gemv_bf16_1x8192x8192", "elementwise_add_64m_fp32", "elementwise_mul_bcast_64m_fp32",
    "elementwise_gelu_64m_fp32", "cast_fp32_to_bf16_64m", "copy_transpose_contiguous_64m",
    "reduction_sum_all_64m_fp32", "reduction_sum_rows_16384x4096_fp32", "layer_norm_16384x4096_fp32",
    "layer_norm_16384x4096_bf16", "softmax_16384x4096_fp32", "softmax_scores_8x16x2048x2048_bf16",
    "sdpa_causal_8x16x2048x64_bf16", "attn_scores_bmm_8x16x2048x2048x64_bf16",
    "triton_add_kernel_64m_fp32",
}
# cases that move more than the compulsory bytes (re-reads): the estimate is a lower bound
LOWER_BOUND = {"gemm_bf16_linear_4096", "gemm_fp32_4096_tf32_off", "gemm_tf32_4096",
               "triton_matmul_kernel_8192_fp16"}


def _joined():
    trace, joined = MEASURED / "ncu_kernels.trace.json.gz", MEASURED / "ncu_vs_trace.csv"
    if not trace.exists() or not joined.exists():
        pytest.skip("docs/measurements has no ncu run")
    rank = tracekit.load_trace(trace).rank()
    costs = estimate_costs(rank, classify(rank)).table
    gpu = rank.gpu
    rows = gpu[(gpu["kind"] == "kernel") & (gpu["step"] == 1)].sort_values("ts").index
    measured = list(csv.DictReader(joined.open()))
    assert len(measured) == len(rows) == 24
    out = []
    for i, m in zip(rows, measured, strict=True):
        assert m["trace_kernel"] == gpu.at[i, "name"]
        dram = float(m["ncu_dram_read_bytes"]) + float(m["ncu_dram_write_bytes"])
        out.append((m["case"], m["fits_l2"] == "True", costs.at[i, BYTES], dram))
    return out


def test_estimated_bytes_match_dram_traffic_for_single_pass_kernels():
    rows = _joined()
    checked = 0
    for case, fits_l2, est, dram in rows:
        if case in WITHIN:
            assert not fits_l2
            assert est / dram == pytest.approx(1.0, abs=0.30), case
            checked += 1
        elif case in LOWER_BOUND:
            assert est < dram, case
    assert checked == len(WITHIN)
    big = [(e, d) for _, fits, e, d in rows if not fits]
    assert sum(abs(e / d - 1) <= 0.30 for e, d in big) >= 15
