"""GPU peak table as data: dense peak FLOP/s per precision and memory bandwidth, matched by name.

Peaks are the vendors' dense figures (datasheet numbers "with sparsity" are halved). Precision
keys: fp64, fp32 (CUDA-core / vector FP32), fp32_matrix (AMD CDNA FP32 matrix cores), tf32,
bf16, fp16, fp8 (also MX-FP8), fp4 (NVFP4/MX-FP4 with both operands fp4), int8. A key that is missing means the device has no such unit. AMD MI250/MI250X
rows are per GCD: ROCm shows each of the two dies of the package as one device."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracekit.trace.model import TraceMeta

PRECISIONS = ("fp64", "fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")


@dataclass(frozen=True)
class Device:
    """One row of the device table."""

    key: str
    name: str
    peak_tflops: dict[str, float]  # precision -> dense TFLOP/s
    memory_gbps: float  # HBM/GDDR bandwidth, GB/s (1e9 bytes per second)
    source: str
    patterns: tuple[str, ...] = ()  # regexes searched in deviceProperties' name
    generic: str | None = None  # regex for names without a capacity ("NVIDIA A100"), which then
    min_memory_gb: float = 0.0  # matches only with at least this much totalGlobalMem
    arch: tuple[int, int, int] | None = None  # (computeMajor, computeMinor, numSms) fallback
    l2_mb: float | None = None  # last-level cache in front of memory
    notes: tuple[str, ...] = field(default=())

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak in FLOP/s for `precision`, None when the device has no such unit."""
        tflops = self.peak_tflops.get(precision)
        return tflops * 1e12 if tflops else None

    @property
    def memory_bandwidth(self) -> float:
        """Peak memory bandwidth in bytes per second."""
        return self.memory_gbps * 1e9

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "peak_tflops": dict(self.peak_tflops),
            "memory_gbps": self.memory_gbps,
            "l2_mb": self.l2_mb,
            "source": self.source,
            "notes": list(self.notes),
        }


_HOPPER = {"fp64": 34.0, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
           "fp8": 1978.9, "int8": 1978.9}
_HOPPER_NVL = {"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5,
               "fp8": 1670.5, "int8": 1670.5}
_A100 = {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0}
_V100 = {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}
_SPARSE = "sparsity figures halved"

# Order matters: the first row whose pattern (and memory floor) matches wins.
DEVICES: tuple[Device, ...] = (
    Device("h200-nvl", "NVIDIA H200 NVL", _HOPPER_NVL, 4800.0,
           f"NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column ({_SPARSE})",
           (r"H200 NVL",), l2_mb=50.0),
    Device("h200", "NVIDIA H200 SXM 141GB", _HOPPER, 4800.0,
           f"NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column ({_SPARSE})",
           (r"\bH200\b",), l2_mb=50.0,
           notes=("cudaDeviceProp.l2CacheSize read 60 MB on the H200 used for docs/validation.md",)),
    Device("h100-nvl", "NVIDIA H100 NVL", _HOPPER_NVL, 3900.0,
           f"NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column ({_SPARSE})",
           (r"H100 NVL",), l2_mb=50.0),
    Device("h100-pcie", "NVIDIA H100 PCIe 80GB", {"fp64": 26.0, "fp32": 51.0, "tf32": 378.0,
           "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0, "int8": 1513.0}, 2000.0,
           f"NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column ({_SPARSE})",
           (r"H100 PCIe", r"H100-PCIE"), l2_mb=50.0),
    Device("h100-sxm", "NVIDIA H100 SXM5 80GB", _HOPPER, 3350.0,
           f"NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column; exact dense values from the "
           f"NVIDIA H100 Tensor Core GPU Architecture whitepaper, SXM5 ({_SPARSE})",
           (r"\bH100\b",), l2_mb=50.0),
    Device("a100-80gb-pcie", "NVIDIA A100 80GB PCIe", _A100, 1935.0,
           f"NVIDIA A100 Tensor Core GPU datasheet, A100 80GB PCIe column ({_SPARSE})",
           (r"A100 80GB PCIe", r"A100-PCIE-80GB"), l2_mb=40.0),
    Device("a100-80gb", "NVIDIA A100 SXM4 80GB", _A100, 2039.0,
           f"NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column ({_SPARSE})",
           (r"\bA100\b.*80GB",), generic=r"\bA100\b", min_memory_gb=60.0, l2_mb=40.0),
    Device("a100-40gb", "NVIDIA A100 40GB", _A100, 1555.0,
           f"NVIDIA A100 Tensor Core GPU datasheet, A100 40GB PCIe/SXM columns ({_SPARSE})",
           (r"A100-SXM4?-40GB", r"A100-PCIE-40GB", r"A100-PG509-200", r"\bA100\b"), l2_mb=40.0,
           notes=("A100-PG509-200 is an SXM4 40GB board (42 GB totalGlobalMem in the HTA traces)",)),
    Device("a10", "NVIDIA A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0,
           "int8": 250.0}, 600.0, f"NVIDIA A10 Tensor Core GPU datasheet ({_SPARSE})",
           (r"\bA10$", r"\bA10 "), l2_mb=6.0),
    Device("l40s", "NVIDIA L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05,
           "fp8": 733.0, "int8": 733.0}, 864.0, f"NVIDIA L40S GPU datasheet ({_SPARSE})",
           (r"\bL40S\b",), l2_mb=96.0),
    Device("l4", "NVIDIA L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0,
           "fp8": 242.5, "int8": 242.5}, 300.0, f"NVIDIA L4 Tensor Core GPU datasheet ({_SPARSE})",
           (r"\bL4$", r"\bL4 "), l2_mb=48.0),
    Device("v100s-pcie", "NVIDIA V100S PCIe 32GB", {"fp64": 8.2, "fp32": 16.4, "fp16": 130.0},
           1134.0, "NVIDIA V100 Tensor Core GPU datasheet, V100S PCIe column",
           (r"V100S",), l2_mb=6.0),
    Device("v100-pcie", "NVIDIA V100 PCIe", {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, 900.0,
           "NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe column",
           (r"V100-PCIE",), l2_mb=6.0),
    Device("v100-sxm2", "NVIDIA V100 SXM2 / DGX Station", _V100, 900.0,
           "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column (DGX Station V100: same GPU)",
           (r"V100-SXM2", r"V100-DGXS", r"\bV100\b"), l2_mb=6.0),
    Device("rtx4090", "NVIDIA GeForce RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2,
           "fp16": 165.2, "fp8": 330.3, "int8": 660.6}, 1008.0,
           "NVIDIA Ada Lovelace architecture whitepaper v2.02, Appendix A, GeForce RTX 4090 "
           "(FP16/BF16/FP8 tensor rates with FP32 accumulate, dense)", (r"RTX 4090",), l2_mb=72.0),
    Device("rtx4060-laptop", "NVIDIA GeForce RTX 4060 Laptop GPU", {"fp32": 14.6, "tf32": 14.6,
           "bf16": 29.1, "fp16": 29.1, "fp8": 58.2, "int8": 116.5}, 256.0,
           "derived: NVIDIA RTX 4060 Laptop GPU specifications (3072 CUDA cores, boost up to "
           "2370 MHz, 128-bit GDDR6 at 16 Gbps) x per-SM rates of the Ada whitepaper; laptops "
           "with a lower power limit clock lower", (r"RTX 4060 Laptop",), l2_mb=32.0),
    Device("b200", "NVIDIA B200", {"fp64": 37.0, "fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0,
           "fp16": 2250.0, "fp8": 4500.0, "fp4": 9000.0, "int8": 4500.0}, 8000.0,
           f"NVIDIA HGX B200 datasheet, per GPU = 8-GPU figures / 8 ({_SPARSE}; FP4 144 PFLOPS sparse / 8 / 2)",
           (r"\bB200\b",)),
    Device("mi300x", "AMD Instinct MI300X", {"fp64": 81.7, "fp32": 163.4, "fp32_matrix": 163.4,
           "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, 5300.0,
           "AMD Instinct MI300X data sheet (dense figures)", (r"MI300X",), arch=(9, 4, 304),
           l2_mb=256.0, notes=("l2_mb is the 256 MB AMD Infinity Cache",)),
    Device("mi250x", "AMD Instinct MI250X (one GCD)", {"fp64": 23.95, "fp32": 23.95,
           "fp32_matrix": 47.85, "bf16": 191.5, "fp16": 191.5, "int8": 191.5}, 1638.4,
           "AMD Instinct MI250X data sheet (OAM figures / 2 GCDs)", (r"MI250X(?!.*MI250\b)",),
           arch=(9, 0, 110), l2_mb=8.0),
    Device("mi250", "AMD Instinct MI250 (one GCD)", {"fp64": 22.65, "fp32": 22.65,
           "fp32_matrix": 45.25, "bf16": 181.05, "fp16": 181.05, "int8": 181.05}, 1638.4,
           "AMD Instinct MI250 data sheet (OAM figures / 2 GCDs)", (r"^(?!.*MI250X).*\bMI250\b",),
           arch=(9, 0, 104), l2_mb=8.0),
)

_CAPACITY = re.compile(r"(?<!\d)\d+\s*GB", re.IGNORECASE)  # (?<!\d): linear on long digit runs
_COMPILED = tuple((d, tuple(re.compile(p, re.IGNORECASE) for p in d.patterns)) for d in DEVICES)


def match_device(source: TraceMeta | dict | str | None) -> Device | None:
    """The device-table row for a trace's device (TraceMeta), a deviceProperties dict or a name.

    Name patterns first (with a memory floor where 40/80 GB parts share a name), then, for names
    that say nothing (ROCm's 'AMD Radeon Graphics'), compute capability and multiprocessor count."""
    props: dict = {}
    name: str | None = None
    if isinstance(source, TraceMeta):
        props = source.device or {}
        name = source.device_name or props.get("name")
    elif isinstance(source, dict):
        props, name = source, source.get("name")
    elif isinstance(source, str):
        name = source
    mem_gb = _memory_gb(props) or 0.0
    if name:
        sized = _CAPACITY.search(name) is not None
        for device, patterns in _COMPILED:
            if any(p.search(name) for p in patterns):
                return device
            if (device.generic and not sized and mem_gb >= device.min_memory_gb
                    and re.search(device.generic, name)):
                return device
    arch = (props.get("computeMajor"), props.get("computeMinor"), props.get("numSms"))
    for device in DEVICES:
        if device.arch is not None and device.arch == arch:
            return device
    return None


def _memory_gb(props: dict) -> float | None:
    mem = props.get("totalGlobalMem")
    return mem / 1e9 if isinstance(mem, (int, float)) and mem > 0 else None
