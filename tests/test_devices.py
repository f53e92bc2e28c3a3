"""The device table: name matching, the data's own consistency, and the shared traces' devices."""

from __future__ import annotations

import pytest
from conftest import SHARED_TRACES

import tracekit
from tracekit.analyzers.devices import DEVICES, PRECISIONS, match_device

NAMES = [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA A100-PG509-200", "a100-40gb"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2"),
    ("Tesla V100-DGXS-32GB", "v100-sxm2"),
    ("Tesla V100-PCIE-32GB", "v100-pcie"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA GeForce RTX 4060 Laptop GPU", "rtx4060-laptop"),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI300X VF", "mi300x"),
    ("AMD Instinct MI250X", "mi250x"),
    ("AMD Instinct MI250", "mi250"),
    # not in the table: unknown, never a near miss
    ("NVIDIA A10G", None),
    ("NVIDIA L40", None),
    ("NVIDIA GeForce RTX 4060", None),
    ("NVIDIA GH200 480GB", None),
    ("Tesla T4", None),
    ("AMD Instinct MI250X / MI250", None),  # ambiguous name: needs the CU count
    ("", None),
]


@pytest.mark.parametrize(("name", "key"), NAMES)
def test_match_by_name(name, key):
    device = match_device(name)
    assert (device.key if device else None) == key


def test_memory_and_architecture_decide_when_the_name_does_not():
    assert match_device({"name": "NVIDIA A100", "totalGlobalMem": 85_899_345_920}).key == "a100-80gb"
    assert match_device({"name": "NVIDIA A100", "totalGlobalMem": 42_297_524_224}).key == "a100-40gb"
    mi250 = {"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "numSms": 104}
    assert match_device(mi250).key == "mi250"
    assert match_device({**mi250, "name": "AMD Instinct MI250X / MI250", "numSms": 110}).key == "mi250x"
    assert match_device({"name": "AMD Radeon Graphics", "computeMajor": 11, "numSms": 48}) is None
    assert match_device(None) is None


def test_table_rows_are_complete_and_consistent():
    keys = [d.key for d in DEVICES]
    assert len(keys) == len(set(keys))
    for d in DEVICES:
        assert d.source and d.patterns and d.memory_gbps > 0, d.key
        assert set(d.peak_tflops) <= set(PRECISIONS), d.key
        assert d.peak_flops("fp32") and d.peak_flops("fp32") > 1e12, d.key
        peaks = d.peak_tflops
        # tensor-core rates never fall below the vector FP32 rate, fp8 doubles bf16 where present
        for p in ("tf32", "bf16", "fp16", "fp8"):
            if p in peaks:
                assert peaks[p] >= peaks["fp32"], (d.key, p)
        if "fp8" in peaks:
            assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.02), d.key
        if "tf32" in peaks and d.key.startswith(("h", "a1", "b")):
            assert peaks["bf16"] == pytest.approx(2 * peaks["tf32"], rel=0.02), d.key
        assert d.to_dict()["name"] == d.name


def test_datasheet_anchors():
    h200, h100 = match_device("NVIDIA H200"), match_device("NVIDIA H100 80GB HBM3")
    assert h200.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h200.memory_bandwidth == 4.8e12 and h100.memory_bandwidth == 3.35e12
    assert h200.peak_flops("bf16") / h200.memory_bandwidth == pytest.approx(206, abs=1)  # ridge point
    assert match_device("NVIDIA A100-SXM4-40GB").peak_flops("fp8") is None  # no FP8 units
    assert match_device("Tesla V100-SXM2-16GB").peak_flops("bf16") is None


@pytest.mark.parametrize(("rel", "key"), [
    ("kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "v100-sxm2"),
    ("hta/trace_diff/test/test.json.gz", "v100-sxm2"),
    ("hta/nccl_parser_config/nccl_data.json.gz", "a100-40gb"),
    ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "mi250"),
    ("tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz", "mi300x"),
    ("tracelens/torch_compile_triton_trace.json.gz", "mi300x"),
])
def test_shared_trace_devices(rel, key):
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip("../shared/traces is absent (third-party trace corpus)")
    rank = tracekit.load_trace(path).rank()
    assert match_device(rank.meta).key == key
