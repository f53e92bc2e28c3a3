"""Roofline rows: grouping, intensity, achieved rates, bound and ceiling choice, by hand."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.devices import match_device
from tracekit.analyzers.kernels import classify
from tracekit.analyzers.roofline import (
    ACHIEVED_GBPS,
    ACHIEVED_TFLOPS,
    ASSUMED,
    BOUND,
    BYTES,
    CLASS,
    COLUMNS,
    COUNT,
    DTYPE,
    FLOPS,
    FROM_NAME,
    INTENSITY,
    MEMORY_PCT,
    NAME,
    PEAK_TFLOPS,
    ROOF,
    ROOF_SOURCE,
    ROOFLINE_PCT,
    TIME_US,
    group_rows,
    roof_for,
    roofline,
    roofline_rows,
)

H200 = match_device("NVIDIA H200")
BF16 = "c10::BFloat16"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


def _row(name, cls, dtype, time_us, flops, nbytes):
    return {NAME: name, CLASS: cls, DTYPE: dtype, TIME_US: time_us, FLOPS: flops, BYTES: nbytes}


def test_compute_bound_gemm_on_h200():
    # 4096^3 bf16 GEMM in 200 µs: 687 TFLOP/s against the 989.4 bf16 roof
    flops, nbytes = 2 * 4096**3, 2 * 3 * 4096 * 4096
    r = roofline_rows(pd.DataFrame([_row(GEMM, "gemm", "bf16", 200.0, flops, nbytes)]), H200).iloc[0]
    assert r[INTENSITY] == pytest.approx(flops / nbytes)  # 1365 FLOP/byte > ridge 206
    assert r[ACHIEVED_TFLOPS] == pytest.approx(687.19, abs=0.01)
    assert r[BOUND] == "compute"
    assert r[ROOFLINE_PCT] == pytest.approx(687.19 / 989.4 * 100, abs=0.01)
    assert (r[ROOF], r[ROOF_SOURCE], r[PEAK_TFLOPS]) == ("bf16", FROM_NAME, pytest.approx(989.4))


def test_memory_bound_elementwise_on_h200():
    # fp32 add of two 256 MiB tensors into a third in 120 µs: 6.71 TB/s... no, 805 MB / 120 µs
    n = 64 * 1024 * 1024
    flops, nbytes = n, 3 * 4 * n
    r = roofline_rows(pd.DataFrame([_row(ADD, "elementwise", "fp32", 200.0, flops, nbytes)]), H200).iloc[0]
    assert r[ACHIEVED_GBPS] == pytest.approx(nbytes / 200e-6 / 1e9)  # 4026.5 GB/s
    assert r[BOUND] == "memory"
    assert r[ROOFLINE_PCT] == pytest.approx(4026.53 / 4800 * 100, abs=0.01)
    assert r[MEMORY_PCT] == r[ROOFLINE_PCT]
    assert r[ROOF] == "fp32"  # non-matrix kernels sit under the vector fp32 roof


def test_fp32_gemm_roof_comes_from_the_kernel_name():
    sgemm = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4"
    tf32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute"
    assert roof_for("gemm", "fp32", sgemm, H200) == ("fp32", FROM_NAME)
    assert roof_for("gemm", "fp32", tf32, H200) == ("tf32", FROM_NAME)
    assert roof_for("gemm", "fp32", "nvjet_sss_tf32_128x256_TNT", H200) == ("tf32", FROM_NAME)
    assert roof_for("gemm", "fp32", "some_gemm_kernel", H200) == ("fp32", ASSUMED)
    assert roof_for("conv", "bf16", "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32", H200) == ("bf16", FROM_NAME)
    assert roof_for("gemm", "fp16", "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", H200)[0] == "fp16"
    # AMD CDNA: fp32 GEMMs run on the FP32 matrix cores
    assert roof_for("gemm", "fp32", "Cijk_Ailk_Bljk_SB_MT64x64", match_device("AMD Instinct MI300X"))[0] == "fp32_matrix"
    # V100 has no bf16 units: the fp32 roof, marked assumed
    assert roof_for("gemm", "bf16", "volta_gemm", match_device("Tesla V100-SXM2-16GB")) == ("fp32", ASSUMED)
    assert roof_for("elementwise", "fp64", ADD, H200)[0] == "fp64"


def test_grouping_sums_and_unknown_members(tmp_path):
    frame = pd.DataFrame([
        {**_row(GEMM, "gemm", "bf16", 100.0, 1e9, 1e6), "op": "aten::mm", "shapes": ((1, 2),), "library": "cublas"},
        {**_row(GEMM, "gemm", "bf16", 50.0, 1e9, 1e6), "op": "aten::mm", "shapes": ((1, 2),), "library": "cublas"},
        {**_row(GEMM, "gemm", "bf16", 10.0, 1e9, math.nan), "op": "aten::mm", "shapes": ((3, 4),), "library": "cublas"},
        {**_row("k", "other", None, 5.0, math.nan, math.nan), "op": None, "shapes": None, "library": "other"},
    ])
    g = group_rows(frame)
    assert list(g[COUNT]) == [2, 1, 1]
    assert list(g[TIME_US]) == [150.0, 10.0, 5.0]
    assert g[FLOPS].iloc[0] == 2e9 and g[BYTES].iloc[0] == 2e6
    assert math.isnan(g[BYTES].iloc[1]) and g[FLOPS].iloc[1] == 1e9
    assert g["op"].iloc[2] is None and g[DTYPE].iloc[2] is None
    rows = roofline_rows(g, None)  # no device: rates, but no bound
    assert rows[BOUND].isna().all() and rows[ROOFLINE_PCT].isna().all()
    assert rows[ACHIEVED_TFLOPS].iloc[0] == pytest.approx(2e9 / 150e-6 / 1e12)


def _trace(tmp_path, device=None):
    b = TraceBuilder()
    if device is not None:
        b.top["deviceProperties"] = [device]
    for i in range(2):
        t = i * 1000
        mm = b.op("aten::mm", t, 100, **{"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": [BF16, BF16]})
        b.launch(t + 10, 5, GEMM, t + 200, 200, ext=mm)
        add = b.op("aten::add", t + 120, 20, **{"Input Dims": [[8192, 8192], [8192], []],
                                               "Input type": ["float", "float", "Scalar"]})
        b.launch(t + 125, 5, ADD, t + 410, 120, ext=add)
    b.launch(2100, 5, "Memcpy HtoD (Pageable -> Device)", 2200, 100, api="cudaMemcpyAsync", kind="memcpy",
             bytes=1 << 26)
    return tracekit.load_trace(b.write(tmp_path / "rf.json")).rank()


def test_roofline_on_a_synthetic_trace(tmp_path):
    rank = _trace(tmp_path)
    kc = classify(rank)
    costs = estimate_costs(rank, kc)
    rf = roofline(rank, kc, costs, match_device(rank.meta))
    t = rf.table
    assert tuple(t.columns) == COLUMNS
    gemm = t[t[NAME] == GEMM].iloc[0]
    assert gemm[COUNT] == 2 and gemm[TIME_US] == 400 and gemm[FLOPS] == 2 * 2 * 4096**3
    assert gemm[BOUND] == "compute" and gemm[ROOFLINE_PCT] == pytest.approx(687.19 / 989.4 * 100, abs=0.01)
    add = t[t[NAME] == ADD].iloc[0]
    assert add[BOUND] == "memory" and add[DTYPE] == "fp32"
    assert add[BYTES] == 2 * 4 * (2 * 8192 * 8192 + 8192)
    host = t[t[NAME].str.startswith("Memcpy")].iloc[0]
    assert host[BOUND] is None and math.isnan(host[ROOFLINE_PCT])  # PCIe, not HBM
    assert host[ACHIEVED_GBPS] == pytest.approx((1 << 26) / 100e-6 / 1e9)
    assert rf.device.key == "h200" and rf.notes == ()
    doc = json.loads(json.dumps(rf.to_dict()))
    assert doc["kernels"][0][NAME] == GEMM and doc["device"]["key"] == "h200"
    assert doc["kernels"][-1][ROOFLINE_PCT] is None


def test_unknown_device_says_so(tmp_path):
    rank = _trace(tmp_path, {"id": 0, "name": "NVIDIA Mystery GPU", "computeMajor": 12, "numSms": 3})
    kc = classify(rank)
    rf = roofline(rank, kc, estimate_costs(rank, kc), match_device(rank.meta))
    assert rf.device is None
    assert any("not in tracekit's device table" in n for n in rf.notes)
    assert rf.table[BOUND].isna().all()
    assert rf.table[ACHIEVED_TFLOPS].notna().any()


def _fp32_gemm_trace(tmp_path, device, kernel="cutlass_gemm_kernel_128x128", shapes=True):
    b = TraceBuilder()
    b.top["deviceProperties"] = [device]
    args = {"Input Dims": [[2048, 2048], [2048, 2048]], "Input type": ["float", "float"]} if shapes else {}
    mm = b.op("aten::mm", 0, 100, **args)
    b.launch(10, 5, kernel, 200, 500, ext=mm)
    rank = tracekit.load_trace(b.write(tmp_path / "fp32.json")).rank()
    kc = classify(rank)
    return roofline(rank, kc, estimate_costs(rank, kc), match_device(rank.meta))


def test_notes_say_which_roof_was_assumed_and_what_is_missing(tmp_path):
    h200 = {"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0, "numSms": 132}
    rf = _fp32_gemm_trace(tmp_path, h200)
    assert rf.table[ROOF_SOURCE].iloc[0] == ASSUMED and rf.table[ROOF].iloc[0] == "fp32"
    assert any("compared with the fp32 peak" in n for n in rf.notes)
    # a V100 has no TF32: fp32 is the only roof, nothing assumed
    v100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "numSms": 80}
    rf = _fp32_gemm_trace(tmp_path, v100)
    assert rf.table[ROOF_SOURCE].iloc[0] == "dtype" and rf.notes == ()
    rf = _fp32_gemm_trace(tmp_path, h200, shapes=False)
    assert any("record_shapes=True" in n for n in rf.notes)
