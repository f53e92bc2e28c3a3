"""Costs estimated from the kernels an op launched (tracekit.analyzers.costs.estimates): the trtllm-gen
fused MoE under vllm::moe_forward, checked against counts read by hand from the B200 trace's raw events."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import SHARED_TRACES

from tracekit.analyzers.costs import attribution as at
from tracekit.analyzers.costs.estimates import trtllm_moe
from tracekit.analyzers.costs.op_args import OpArgs
from tracekit.analyzers.kernels import classify
from tracekit.trace import tables
from tracekit.trace.load import load_trace

B200 = SHARED_TRACES / "tracelens" / "b200" / "eager_trace.json.gz"
BF16 = "c10::BFloat16"
GEMM1 = "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_swiGlu_sm100f"
GEMM2 = "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_sm100f"
FINAL = ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
         "cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true>)")
MX_FP4, MX_FP8 = 0.5 + 1 / 32, 1 + 1 / 32  # bytes per element, one E8M0 scale per 32 elements


def _moe(names, grids, tokens=888):
    args = OpArgs.of([[tokens, 3072], [tokens, 128], []], [BF16, BF16, ""])
    return trtllm_moe(args, names, grids, [1.0] * len(names))


def test_synthetic_moe_call_by_hand():
    # T=888, H=3072, E=128, top-4 (finalize's template argument); gemm1 grid.x 8 * tile M 128 = 1024
    # gate+up features (swiGlu: I = 512); gemm2 grid.x 24 * 128 = 3072 = H
    out = _moe([GEMM1, GEMM2, FINAL], [(8, 342), (24, 342), (888, 1)])
    assert out is not None
    rows = 888 * 4
    assert out[0][0] == 2 * rows * 3072 * 1024 and out[0][2] == "fp8"
    assert out[1][0] == 2 * rows * 512 * 3072 and out[1][2] == "fp8"
    # gemm1 bytes: 128 experts' [1024, 3072] MX-FP4 weights, the 888 tokens' MX-FP8 rows, 3552 rows of 512 out
    assert out[0][1] == pytest.approx(128 * 1024 * 3072 * MX_FP4 + 888 * 3072 * MX_FP8 + rows * 512 * MX_FP8)
    # finalize: 2 FLOPs per routed element; reads 3552 bf16 rows of 3072, ids (4 B) and weights (2 B), the hidden
    assert out[2] == (2 * rows * 3072, rows * 3072 * 2 + rows * 6 + 888 * 3072 * 2, "bf16")


def test_moe_estimate_abstains_when_the_kernels_disagree():
    assert _moe([GEMM1, GEMM2, FINAL], [(8, 342), (16, 342), (888, 1)]) is None  # gemm2 writes 2048 != H
    assert _moe([GEMM1, GEMM2], [(8, 342), (24, 342)]) is None  # no finalize: top-k unknown
    assert _moe([GEMM1, GEMM2, FINAL], [(8, 100), (24, 342), (888, 1)]) is None  # 100*16 < 3552 rows
    one = _moe([GEMM1, GEMM2, FINAL], [(8, 1), (24, 1), (1, 1)], tokens=1)  # one token: 4 experts' weights
    assert one is not None and one[1][1] == pytest.approx(4 * 3072 * 512 * MX_FP4 + 4 * 512 * MX_FP8 + 4 * 3072 * 2)


def _first_moe_call(events):
    """The first vllm::moe_forward event and its aten::empty children's shapes and dtype codes."""
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    moe = next(e for e in ops if e["name"] == "vllm::moe_forward")
    t0, t1 = moe["ts"], moe["ts"] + moe["dur"]
    empties = [(json.loads(e["args"]["Concrete Inputs"][0]), int(e["args"]["Concrete Inputs"][1])) for e in ops
               if e["name"] == "aten::empty" and e["tid"] == moe["tid"] and t0 <= e["ts"] <= t1]
    return moe, empties


def test_b200_moe_forward_flops_from_raw_events():
    if not B200.exists():
        pytest.skip("../shared/traces/tracelens/b200 is absent (third-party trace corpus)")
    with gzip.open(B200, "rt") as f:
        events = json.load(f)["traceEvents"]
    moe, empties = _first_moe_call(events)
    (tokens, hidden), (_, experts) = moe["args"]["Input Dims"][:2]  # [888, 3072], [888, 128]
    # top-k: the op allocates int32 (code 3) ids and bf16 (15) weights of [T, k]: [888, 4]
    top_k = next(s[1] for s, code in empties if code == 3 and len(s) == 2 and s[0] == tokens)
    # the first GEMM's output: uint8 (code 0, fp8 bytes) [padded rows, I]: I = 512
    inter = next(s[1] for s, code in empties if code == 0 and len(s) == 2 and s[0] > tokens)
    assert (tokens, hidden, experts, top_k, inter) == (888, 3072, 128, 4, 512)
    corr = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "kernel"
            and e["args"].get("External id") == moe["args"]["External id"]}

    rank = next(iter(load_trace(B200).ranks.values()))
    costs = at.estimate_costs(rank, classify(rank))
    gpu = rank.gpu
    rows = np.flatnonzero(gpu[tables.GPU_CORRELATION].isin(list(corr)).to_numpy())
    t = costs.table.iloc[rows]
    names = gpu[tables.GPU_NAME].to_numpy()[rows]
    assert set(t[at.SOURCE]) == {at.SOURCE_ESTIMATE}  # every kernel of the call: routing, GEMMs, finalize
    flops = dict(zip(names, t[at.FLOPS], strict=True))
    g1 = next(v for n, v in flops.items() if n.startswith("bmm_") and "swiGlu" in n)
    g2 = next(v for n, v in flops.items() if n.startswith("bmm_Bfloat16"))
    assert g1 == 2 * tokens * top_k * hidden * (2 * inter)  # gate and up
    assert g2 == 2 * tokens * top_k * inter * hidden  # down
    estimated = (costs.table[at.SOURCE] == at.SOURCE_ESTIMATE).to_numpy()
    assert costs.estimated[0][0] == "vllm::moe_forward"
    assert costs.estimated[0][1] == pytest.approx(float(gpu[tables.GPU_DUR].to_numpy()[estimated].sum()))


def test_estimates_are_marked_in_json_and_text(capsys):
    if not B200.exists():
        pytest.skip("../shared/traces/tracelens/b200 is absent (third-party trace corpus)")
    from tracekit.cli import main

    assert main(["analyze", "--json", str(B200)]) == 0
    doc = json.loads(capsys.readouterr().out)
    kernels = doc["kernels"]
    by_op = {r["key"]: r for r in doc["operators"][0]["groupings"][0]["rows"]}
    assert by_op["vllm::moe_forward"].get("estimated") is True  # the op view's FLOPs hold the estimate
    assert "estimated" not in by_op["aten::linear"]
    marked = {k["name"].split("_")[1] for k in kernels if k.get("estimated")}
    assert {"MxE4m3", "Bfloat16"} <= marked  # the two MoE GEMMs (bmm_<output type>_...)
    assert all(k.get("estimated") in (None, True) for k in kernels)  # the key only where true
    assert not any(k.get("estimated") for k in kernels if k["op"] != "vllm::moe_forward")
    assert main(["analyze", str(B200)]) == 0
    text = capsys.readouterr().out
    row = next(x for x in text.splitlines() if "bmm_MxE4m3" in x)
    assert " ~" in row  # its TFLOP/s
    assert main(["analyze", "--by", "op", str(B200)]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.endswith("vllm::moe_forward"))
    assert " ~" in row  # its FLOPs
