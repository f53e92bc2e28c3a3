"""Roofline on this project's H200 sample traces: the ceiling each GEMM gets, decode GEMVs, Triton."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_TRACES

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.devices import match_device
from tracekit.analyzers.kernels import classify
from tracekit.analyzers.roofline import (
    BOUND,
    CLASS,
    COUNT,
    FLOPS,
    FROM_NAME,
    NAME,
    OP,
    ROOF,
    ROOF_SOURCE,
    ROOFLINE_PCT,
    SHAPES,
    roofline,
)


def _roofline(name):
    path = SAMPLE_TRACES / f"{name}.trace.json.gz"
    if not path.exists():
        pytest.skip(f"sample_traces/{path.name} is not recorded in this checkout")
    rank = tracekit.load_trace(path).rank()
    kc = classify(rank)
    costs = estimate_costs(rank, kc)
    return roofline(rank, kc, costs, match_device(rank.meta)), costs


@pytest.mark.parametrize(("name", "roof", "low", "high"), [
    ("linear_fp32", "fp32", 65, 90),  # TF32 off: cuBLAS's ffma kernel, ~51 of 66.9 TFLOP/s
    ("linear_tf32", "tf32", 70, 95),
    ("linear_bf16", "bf16", 70, 95),
])
def test_linear_gemm_sits_under_its_precision_roof(name, roof, low, high):
    rf, costs = _roofline(name)
    gemm = rf.table[rf.table[CLASS] == "gemm"].iloc[0]
    assert gemm[OP] == "aten::addmm" and gemm[FLOPS] == gemm[COUNT] * 2 * 4096**3
    assert (gemm[ROOF], gemm[ROOF_SOURCE], gemm[BOUND]) == (roof, FROM_NAME, "compute")
    assert low < gemm[ROOFLINE_PCT] < high
    assert costs.flops_known_share == 1.0


def test_gpt2_decode_gemvs_are_memory_bound():
    rf, costs = _roofline("gpt2_decode")
    gemm = rf.table[(rf.table[CLASS] == "gemm") & rf.table[FLOPS].notna()]
    one_row = gemm[SHAPES].map(lambda s: any(len(d) == 2 and d[0] == 1 for d in s))  # x [1, K]: decode
    gemv = gemm[one_row]
    assert len(gemv) >= 5 and (gemv[BOUND] == "memory").all()
    # the 32-token prefill GEMMs (x [32, K], 15 FLOP/byte) pass the fp32 ridge (66.9 / 4800 = 14)
    assert (gemm[~one_row][BOUND] == "compute").all()
    assert (gemv[ROOF] == "fp32").all() and (gemv[ROOF_SOURCE] == FROM_NAME).all()
    assert costs.flops_known_share > 0.95


def test_user_triton_matmul_gets_flops_from_its_arguments():
    rf, _ = _roofline("triton_matmul")
    row = rf.table[rf.table[NAME] == "matmul_kernel"].iloc[0]
    assert row[FLOPS] == row[COUNT] * 2 * 2048**3 and row[BOUND] == "compute"
    rf, costs = _roofline("triton_vector_add")
    assert costs.bytes_known_share == 1.0 and costs.flops_known_share == 0.0  # no M/N/K: unknown
