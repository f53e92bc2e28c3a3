"""Costs estimated from the kernels an op launched (tracekit.analyzers.costs.estimates): the trtllm-gen
fused MoE under vllm::moe_forward and vLLM's paged attention (vllm::unified_attention*), checked against
counts read by hand from the B200 trace's raw events and against synthetic calls worked by hand."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import SHARED_TRACES

from tracekit.analyzers.costs import attribution as at
from tracekit.analyzers.costs.estimates import (
    ServingStep,
    paged_attention,
    serving_step,
    trtllm_moe,
    unified_attention,
)
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
    estimated = ((costs.table[at.SOURCE] == at.SOURCE_ESTIMATE) & (costs.table[at.OP] == "vllm::moe_forward")).to_numpy()
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
    estimated_ops = {"vllm::moe_forward", "vllm::unified_attention_with_output"}
    assert not any(k.get("estimated") for k in kernels if k["op"] not in estimated_ops)
    assert main(["analyze", str(B200)]) == 0
    text = capsys.readouterr().out
    row = next(x for x in text.splitlines() if "bmm_MxE4m3" in x)
    assert " ~" in row  # its TFLOP/s
    assert main(["analyze", "--by", "op", str(B200)]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.endswith("vllm::moe_forward"))
    assert " ~" in row  # its FLOPs


FMHA = "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext"
FMHA_SLIDING = "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvSlidingOrChunkedCausalP16VarSeqQ128Kv128PersistentContext"
FP8 = "c10::Float8_e4m3fn"


def _attention(step, names=(FMHA,), tokens=888):
    args = OpArgs.of([[tokens, 8, 64], [tokens, 1, 64], [tokens, 1, 64], [tokens, 8, 64], [], [], []],
                     [FP8, BF16, BF16, BF16, "", "", ""])
    return unified_attention(args, list(names), step)


def test_vllm_step_annotation_is_parsed():
    assert serving_step("execute_context_1(888)_generation_0(0)") == ServingStep(1, 888, 0, 0)
    assert serving_step("execute_context_1(888_788544)_generation_0(0)") == ServingStep(1, 888, 0, 0)
    assert serving_step("execute_context_0(0)_generation_32(32)") == ServingStep(0, 0, 32, 32)
    assert serving_step("ProfilerStep#3") is None


def test_synthetic_unified_attention_by_hand():
    # one causal prompt of 888 tokens, 8 query heads and 1 KV head of 64: 888*889/2 = 394,716 attended
    # pairs, 2 * 8 * (64 + 64) FLOPs each; bytes: q fp8 888*8*64, output bf16 888*8*64*2, K and V of 888
    # tokens in the kernel's E4m3 (1 byte): 888*1*128
    out = _attention(ServingStep(1, 888, 0, 0))
    assert out == [(2 * 8 * 128 * 394_716, 888 * 512 + 888 * 512 * 2 + 888 * 128, "fp8")]
    # two prompts of 444: 2 * (444*445/2) = 197,580 pairs
    two = _attention(ServingStep(2, 888, 0, 0), names=("void vllm::other_kernel<...>", FMHA))
    assert two is not None and two[0] is None and two[1] is not None and two[1][0] == 2 * 8 * 128 * 197_580


def test_unified_attention_abstains_without_what_it_needs():
    assert _attention(None) is None  # no vLLM step annotation around the call
    assert _attention(ServingStep(1, 880, 1, 1)) is None  # a decode token: its context length is not recorded
    assert _attention(ServingStep(1, 880, 0, 0)) is None  # the step's tokens are not the call's (padding)
    assert _attention(ServingStep(1, 888, 0, 0), names=(FMHA_SLIDING,)) is None  # the window is not recorded
    assert _attention(ServingStep(1, 888, 0, 0), names=("void vllm::other_kernel<...>",)) is None


def test_b200_unified_attention_from_raw_events():
    if not B200.exists():
        pytest.skip("../shared/traces/tracelens/b200 is absent (third-party trace corpus)")
    with gzip.open(B200, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context_")]
    assert {e["name"] for e in steps} == {"execute_context_1(888_788544)_generation_0(0)"}  # one prompt of 888
    calls = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "vllm::unified_attention_with_output"]
    (tokens, hq, d), (_, hk, _), (_, _, dv) = calls[0]["args"]["Input Dims"][:3]
    assert (tokens, hq, hk, d, dv) == (888, 8, 1, 64, 64)
    by_corr = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "kernel"}
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    causal = sliding = 0
    for call in calls:
        t0, t1 = call["ts"], call["ts"] + call["dur"]
        names = [by_corr.get(e["args"].get("correlation")) for e in launches if t0 <= e["ts"] <= t1]
        fmha = [n for n in names if n and n.startswith("fmha")]
        assert len(fmha) == 1
        sliding += "Sliding" in fmha[0]
        causal += "Sliding" not in fmha[0]
    assert (causal, sliding) == (18, 18)  # the model alternates full and sliding-window layers

    rank = next(iter(load_trace(B200).ranks.values()))
    costs = at.estimate_costs(rank, classify(rank))
    names = rank.gpu[tables.GPU_NAME].to_numpy()
    t = costs.table[(costs.table[at.OP] == "vllm::unified_attention_with_output").to_numpy()]
    kn = names[t.index.to_numpy()]
    full = np.array(["Sliding" not in n for n in kn])
    pairs = tokens * (tokens + 1) // 2  # one causal prompt attending its own 888 keys
    assert full.sum() == causal and (t[at.FLOPS].to_numpy()[full] == 2 * hq * pairs * (d + dv)).all()
    assert (t[at.BYTES].to_numpy()[full] == tokens * hq * d * 1 + tokens * hq * dv * 2 + tokens * hk * (d + dv) * 1).all()
    assert set(t[at.SOURCE].to_numpy()[full]) == {at.SOURCE_ESTIMATE}
    assert np.isnan(t[at.FLOPS].to_numpy()[~full].astype(float)).all()  # sliding window: unknown, not guessed


def _paged(version, longest="1000", names=None):
    """A vLLM _C::paged_attention_v1/v2 call as the profiler records it: 32 decode queries of 32 heads x
    128 (fp16), a [1000 blocks, 8 KV heads, 128/8, 16, 8] key cache and [1000, 8, 128, 16] value cache,
    a [32, 64] int32 block table, max_seq_len as a concrete value."""
    q, kc, vc = [32, 32, 128], [1000, 8, 16, 16, 8], [1000, 8, 128, 16]
    tail_dims = [[], [], [32, 64], [32], [], [], [], [], [], [], [], [], [], [], []]
    tail_types = ["Scalar", "Scalar", "int", "int", "Scalar", "Scalar", "", "String", "float", "float",
                  "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    tail_values = ["8", "0.088", "", "", "16", longest, "", "auto", "", "", "0", "0", "0", "64", "0"]
    head = [[32, 32, 128]] if version == 1 else [[32, 32, 128], [32, 32, 8], [32, 32, 8], [32, 32, 8, 128]]
    head_types = [HALF] if version == 1 else [HALF, "float", "float", HALF]
    dims = [*head, q, kc, vc, *tail_dims]
    types = [*head_types, HALF, HALF, HALF, *tail_types]
    concrete = [""] * (len(head) + 3) + tail_values
    names = names or [f"void vllm::paged_attention_v{version}_kernel<unsigned short, unsigned short, 128, 16, 128>(...)"]
    return paged_attention(OpArgs.of(dims, types, concrete=concrete), names, len(head))


HALF = "c10::Half"


def test_synthetic_paged_attention_by_hand():
    # 32 sequences x max_seq_len 1000 = 32,000 (query, key) pairs, 2 * 32 heads * (128 + 128) FLOPs each;
    # bytes: q and out 32*32*128*2 each, K and V of 32,000 tokens x 8 heads x 128 x 2 bytes each, the
    # 32 x 64 int32 block table
    want = (2 * 32 * 32_000 * 256, 2 * 262_144 + 32_000 * 8 * 512 + 32 * 64 * 4, "fp16")
    assert _paged(1) == [want]
    reduce = "void vllm::paged_attention_v2_reduce_kernel<unsigned short, 128, 128, 512>(...)"
    v2 = _paged(2, names=["void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, 128, 16, 128, 512>(...)",
                          reduce])
    assert v2 == [want, None]  # the reduce kernel is left to the kernel-level models
    assert _paged(1, longest="") is None  # max_seq_len not recorded
    assert _paged(1, names=["void some_other_kernel(...)"]) is None


def test_estimates_through_the_loader(tmp_path):
    """A synthetic vLLM step (tests/tracebuilder): the step annotation around a unified_attention call and
    a paged_attention_v1 call, each launching its kernel; the costs come out marked as estimates."""
    from tracebuilder import TraceBuilder

    b = TraceBuilder()
    b.annotation("execute_context_1(888)_generation_0(0)", 0, 100)
    ua = b.op("vllm::unified_attention_with_output", 10, 20, **{
        "Input Dims": [[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64], []],
        "Input type": [FP8, BF16, BF16, BF16, "String"]})
    b.launch(12, 2, FMHA, 30, 15, ext=ua)
    pa = b.op("_C::paged_attention_v1", 40, 20, **{
        "Input Dims": [[32, 32, 128], [32, 32, 128], [1000, 8, 16, 16, 8], [1000, 8, 128, 16], [], [], [32, 64],
                       [32], [], []],
        "Input type": [HALF, HALF, HALF, HALF, "Scalar", "Scalar", "int", "int", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", "", "", "8", "0.088", "", "", "16", "1000"]})
    b.launch(42, 2, "void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128>(...)",
             50, 30, ext=pa)
    rank = next(iter(load_trace(b.write(tmp_path / "vllm.json")).ranks.values()))
    costs = at.estimate_costs(rank, classify(rank))
    t = costs.table
    assert list(t[at.FLOPS]) == [2 * 8 * 128 * 394_716, 2 * 32 * 32_000 * 256]  # by hand, as above
    assert set(t[at.SOURCE]) == {at.SOURCE_ESTIMATE}
    assert dict(costs.estimated) == {"vllm::unified_attention_with_output": 15.0, "_C::paged_attention_v1": 30.0}
