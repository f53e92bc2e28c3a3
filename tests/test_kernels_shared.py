"""Kernel classification on the real third-party traces and the project's sample traces."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES
from detector_reference import INVARIANT_SAMPLES
from trace_checks import check_other_share

import tracekit
from tracekit.analyzers.kernels import (
    CLASS,
    LIBRARY,
    OTHER,
    SUM_COUNT,
    SUM_KEY,
    SUM_SHARE,
    classify,
    classify_name,
)

H200_NAMES = Path(__file__).resolve().parent / "data" / "kernel_names" / "h200_torch211.json.gz"


def _sample_files() -> list:
    """The sample files test_invariants does not load (it checks the rest: tests/trace_checks.py)."""
    if not SAMPLE_TRACES.is_dir():
        return []
    return sorted(p for p in SAMPLE_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz"))
                  and p not in INVARIANT_SAMPLES)


def _load(rel: str):
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"{rel} is absent (../shared/traces)")
    return tracekit.load_trace(path)


@pytest.mark.parametrize("path", [*_sample_files(), H200_NAMES], ids=lambda p: p.name)
def test_other_share_at_most_two_percent(path):
    check_other_share(tracekit.load_trace(path))


def _classes(rel: str) -> tuple:
    rank = _load(rel).rank()
    kc = classify(rank)
    return kc, kc.classes.set_index(SUM_KEY), kc.libraries.set_index(SUM_KEY)


def _raw_gpu(rel: str) -> list[dict]:
    """The GPU activity events of a trace, read with json alone (independent of the loader)."""
    path = SHARED_TRACES / rel
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    cats = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats]


def test_nccl_trace_classes():
    rel = "hta/nccl_parser_config/nccl_data.json.gz"
    kc, classes, libs = _classes(rel)
    raw = _raw_gpu(rel)
    total = sum(e["dur"] for e in raw)
    nccl = [e for e in raw if e["name"].startswith(("ncclKernel", "ncclDevKernel"))]
    # cuDNN kernels by name, written here from the raw names (not from kernel_patterns)
    cudnn = [e for e in raw if re.search(r"conv|cudnn|implicit_gemm|winograd|wgrad|dgrad|fprop",
                                         e["name"], re.IGNORECASE)]
    assert (len(nccl), len(cudnn)) == (21, 1317)
    assert classes.loc["communication", SUM_COUNT] == len(nccl)
    assert classes.loc["communication", SUM_SHARE] == pytest.approx(sum(e["dur"] for e in nccl) / total)
    # regression value (tracekit's own classification when this test was written, not an independent
    # count): 600 of the 1317 cuDNN kernels are conv; the rest are layout, batch-norm and reduce helpers
    assert classes.loc["conv", SUM_COUNT] == 600
    assert classes.loc["memcpy", SUM_COUNT] == sum(e["cat"] == "gpu_memcpy" for e in raw)
    assert classes.loc["memset", SUM_COUNT] == sum(e["cat"] == "gpu_memset" for e in raw)
    assert libs.loc["nccl", SUM_COUNT] == len(nccl) and libs.loc["cudnn", SUM_COUNT] == len(cudnn)
    assert kc.total_us == pytest.approx(total, rel=1e-9)


def test_resnet50_v100_is_mostly_cudnn_convolution():
    _, classes, libs = _classes("kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    # regression values: tracekit's own classification when this test was written
    assert classes.loc["conv", SUM_COUNT] == 1926
    assert classes.loc["conv", SUM_SHARE] == pytest.approx(0.65334, abs=1e-4)
    assert classes.loc["normalization", SUM_SHARE] == pytest.approx(0.15936, abs=1e-4)
    assert libs.loc["cudnn", SUM_SHARE] == pytest.approx(0.74832, abs=1e-4)


def test_mi300_bert_rocm_names():
    kc, classes, libs = _classes("tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz")
    assert classes.loc["attention", SUM_COUNT] == 4  # aotriton attn_fwd under _flash_attention_forward
    assert libs.loc["flash-attn", SUM_COUNT] == 4
    # raw JSON: 26 `Cijk_*` (hipBLASLt) kernels and 4 `attn_fwd` kernels
    assert classes.loc["gemm", SUM_COUNT] == 26 and libs.loc["hipblaslt", SUM_COUNT] == 26
    assert classes.loc["embedding", SUM_COUNT] == 3  # index_select inside aten::embedding
    assert kc.other_share == 0.0


def test_torch_compile_inductor_kernels():
    rank = _load("tracelens/torch_compile_triton_trace.json.gz").rank()
    kc = classify(rank)
    inductor = kc.table[LIBRARY] == "inductor"
    assert inductor.sum() == 4
    got = dict(zip(rank.gpu["name"][inductor], kc.table[CLASS][inductor], strict=True))
    assert got == {
        "triton_poi_fused__unsafe_view_mul_silu_2": "elementwise",
        "triton_poi_fused__unsafe_view_add_3": "elementwise",
        "triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1": "normalization",
        "triton_red_fused_add_mean_mul_pow_rsqrt_0": "normalization",
    }


def test_triton_example_is_an_inductor_pointwise_kernel():
    rank = _load("hta/triton_example/triton_example.json.gz").rank()
    kc = classify(rank)
    assert list(kc.table[CLASS]) == ["elementwise"] and list(kc.table[LIBRARY]) == ["inductor"]


def test_amd_mi250_rocm_trace():
    rel = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    _, classes, libs = _classes(rel)
    assert classes.loc["gemm", SUM_COUNT] == 2 and libs.loc["hipblaslt", SUM_COUNT] == 2
    raw = _raw_gpu(rel)
    copies = [e for e in raw if e["cat"] == "gpu_memcpy"]
    assert classes.loc["memcpy", SUM_COUNT] == len(copies) == 2
    assert classes.loc["memcpy", SUM_SHARE] == pytest.approx(
        sum(e["dur"] for e in copies) / sum(e["dur"] for e in raw))


def test_h200_names_recorded_by_this_project():
    """Kernels of torch 2.11 / triton 3.6 on an H200 (tests/data/kernel_names/record_h200_names.py)."""
    rank = tracekit.load_trace(H200_NAMES).rank()
    kc = classify(rank)
    got = {}
    for name, cls, lib in zip(rank.gpu["name"], kc.table[CLASS], kc.table[LIBRARY], strict=True):
        got.setdefault(name, set()).add((cls, lib))
    def only(prefix: str) -> set:
        return set().union(*(v for k, v in got.items() if k.startswith(prefix)))
    assert only("nvjet_sm90_") == {("gemm", "cublas")}
    assert only("sm90_xmma_gemm_") == {("gemm", "cublas")}
    assert only("sm90_xmma_wgrad_") == {("conv", "cudnn")}
    assert only("cudnn_generated_fort_native_sdpa_sm90_flash") == {("attention", "cudnn")}
    assert only("void pytorch_flash::flash_") == {("attention", "flash-attn")}
    assert only("fmha_cutlass") == {("attention", "cutlass")}
    assert only("void cudnn::fusion::") == {("attention", "cudnn")}  # cuDNN SDPA backward helpers
    assert only("matmul_kernel") == {("gemm", "triton")} and only("add_kernel") == {("elementwise", "triton")}
    assert only("triton_per_fused__softmax") == {("softmax", "inductor")}
    assert only("void at::native::mbtopk::") == {("reduction", "aten")}
    assert only("Memset") == {("memset", "cuda")}
    classes = kc.classes.set_index(SUM_KEY)
    assert classes.loc["attention", SUM_COUNT] == 10  # flash 1 + 3, mem-efficient 1 + 1, cuDNN 1 + 3
    assert kc.other_share == 0.0


def _by_name(rel: str) -> dict[str, set]:
    """Kernel name -> the (class, library) pairs tracekit gives it."""
    rank = _load(rel).rank()
    kc = classify(rank)
    got: dict[str, set] = {}
    for name, cls, lib in zip(rank.gpu["name"], kc.table[CLASS], kc.table[LIBRARY], strict=True):
        got.setdefault(name, set()).add((cls, lib))
    return got


def test_b200_vllm_tensorrt_llm_kernels():
    """vLLM eager decode on a B200: flashinfer's TensorRT-LLM (trtllm-gen) MoE GEMMs, attention and
    MoE finalize/routing, vLLM's own ops. Counts are taken from the raw names with plain prefixes."""
    rel = "tracelens/b200/eager_trace.json.gz"
    _, classes, _ = _classes(rel)
    raw = [e["name"] for e in _raw_gpu(rel)]
    got = _by_name(rel)
    def only(pattern: str) -> set:
        return set().union(*(v for k, v in got.items() if re.search(pattern, k)))
    assert only(r"^bmm_(MxE4m3|Bfloat16)_MxE2m1MxE4m3_Fp32_") == {("gemm", "trtllm")}  # MX-FP8 x FP4 MoE GEMMs
    assert only(r"^fmhaSm100aKernel_") == {("attention", "trtllm")}
    assert only(r"moe::dev::finalize::finalizeKernelVecLoad") == {("reduction", "trtllm")}  # top-k sum
    assert only(r"moe::dev::routing::") == {("reduction", "trtllm")}  # expert histogram + offsets scan
    assert only(r"vllm::rotary_embedding_kernel") == {("elementwise", "other")}  # RoPE, not a lookup
    assert only(r"vllm::fused_add_rms_norm_kernel") == {("normalization", "other")}
    bmm = sum(n.startswith("bmm_") for n in raw)
    nvjet = sum(n.startswith("nvjet_") for n in raw)
    finalize = sum("finalizeKernelVecLoad" in n for n in raw)
    assert (bmm, finalize) == (72, 36)
    assert classes.loc["gemm", SUM_COUNT] == bmm + nvjet
    assert OTHER not in classes.index


def test_xdit_sage_attention_is_attention():
    """xDiT Flux.1 on MI300X: aiter's Triton Sage attention (sage_fwd), replayed in a HIP graph."""
    rel = "tracelens/inference/xdit_flux.1_aiter_sage/capture_traces/capture_trace_rank_0.json.gz"
    _, classes, _ = _classes(rel)
    raw = [e["name"] for e in _raw_gpu(rel)]
    got = _by_name(rel)
    # the replays join their captured ops, Inductor's launches of aiter's kernel (they carry kernel_file)
    assert got["sage_fwd"] == {("attention", "inductor")}
    assert got["sage_quant_kernel"] == {("elementwise", "inductor")}  # INT8/FP8 quantization of Q, K, V
    # without an op (no capture to join), the name alone says aiter's Triton kernel
    assert classify_name("sage_fwd", api="hipGraphLaunch", platform="rocm")[:2] == ("attention", "triton")
    sage, aotriton = raw.count("sage_fwd"), raw.count("attn_fwd")
    assert (sage, aotriton) == (57, 13)
    assert classes.loc["attention", SUM_COUNT] == sage + aotriton
    assert OTHER not in classes.index
