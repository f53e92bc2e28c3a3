"""Facts about a rank's recording (file, platform, GPUs, versions, event counts) and its CPU-op totals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tracekit.analyzers.devices import Device
from tracekit.trace import tables
from tracekit.trace.model import RankTrace
from tracekit.units import fmt_bytes

MAX_CPU_OPS = 12  # top-level CPU ops listed for a trace without GPU activity


@dataclass(frozen=True)
class GpuInfo:
    """One kind of GPU in deviceProperties and how many the machine has."""

    name: str
    sms: int | None
    memory_bytes: int | None
    compute: str  # 'sm_90', '' when unknown
    count: int


@dataclass(frozen=True)
class CpuOps:
    """Top-level CPU op totals: what a trace without GPU activity shows."""

    ops: int
    threads: int
    top_level_us: float  # summed over threads
    top: tuple[tuple[str, float, int], ...]  # (name, time_us, count), longest first


@dataclass(frozen=True)
class TraceFacts:
    """What the report's Trace section lists; no analysis, only what the file says."""

    path: str
    rank: int
    platform: str
    schema: str
    schema_version: str
    device_name: str | None  # the name the trace gives the GPU the kernels ran on
    device_memory_bytes: int | None
    gpus: tuple[GpuInfo, ...]
    versions: tuple[tuple[str, str], ...]
    distributed: tuple[tuple[str, str], ...]  # scalar entries of distributedInfo
    counts: tuple[tuple[str, int], ...]  # events by category, most first
    skipped: int
    has_shapes: bool  # any CPU op recorded input shapes
    has_gpu: bool
    cpu: CpuOps
    origin_us: int = 0  # file timestamp that table times (µs) are relative to


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _gpus(props: tuple[dict, ...]) -> tuple[GpuInfo, ...]:
    seen: dict[tuple, int] = {}
    for p in props:
        if isinstance(p, Mapping) and p.get("name"):
            cc = f"sm_{p['computeMajor']}{p['computeMinor']}" if "computeMajor" in p and "computeMinor" in p else ""
            key = (str(p["name"]), _int(p.get("numSms")), _int(p.get("totalGlobalMem")), cc)
            seen[key] = seen.get(key, 0) + 1
    return tuple(GpuInfo(n, sms, mem, cc, count) for (n, sms, mem, cc), count in seen.items())


def has_shapes(rank: RankTrace) -> bool:
    """Whether any CPU op in the rank recorded input shapes."""
    ops = rank.ops
    if tables.OP_INPUT_DIMS not in ops:
        return False
    if ops[tables.OP_INPUT_DIMS].notna().any():  # decoded up front for ops that issued GPU work
        return True
    store = rank.op_input_store
    return store is not None and bool(store.has_values(tables.OP_INPUT_DIMS))


def cpu_ops(rank: RankTrace) -> CpuOps:
    """Top-level CPU ops by total time, with op and thread counts."""
    ops = rank.ops
    if not len(ops):
        return CpuOps(0, 0, 0.0, ())
    top = ops[ops[tables.OP_DEPTH] == 0] if tables.OP_DEPTH in ops else ops
    g = top.groupby(tables.OP_NAME)[tables.OP_DUR].agg(["sum", "count"]).sort_values("sum", ascending=False)
    rows = tuple((str(n), float(r["sum"]), int(r["count"])) for n, r in g.head(MAX_CPU_OPS).iterrows())
    threads = int(ops[tables.OP_TID].nunique()) if tables.OP_TID in ops else 0
    return CpuOps(ops=len(ops), threads=threads, top_level_us=float(top[tables.OP_DUR].sum()), top=rows)


def trace_facts(rank: RankTrace) -> TraceFacts:
    """The facts of one RankTrace."""
    meta = rank.meta
    device = meta.device or {}
    dist = meta.distributed or {}
    return TraceFacts(
        path=str(rank.path),
        rank=int(rank.rank),
        platform=str(meta.platform),
        schema=str(meta.schema),
        schema_version=str(meta.schema_version) if meta.schema_version is not None else "",
        device_name=meta.device_name or (str(device["name"]) if device.get("name") else None),
        device_memory_bytes=_int(device.get("totalGlobalMem")),
        gpus=_gpus(meta.device_properties),
        versions=tuple((str(k), str(v)) for k, v in (meta.versions or {}).items())
        + ((("torch", str(meta.tracekit["torch"])),) if isinstance(meta.tracekit, dict) and meta.tracekit.get("torch") else ()),
        distributed=tuple((str(k), str(v)) for k, v in dist.items() if not isinstance(v, (Mapping, list, tuple))),
        counts=tuple(sorted(((str(k), int(v)) for k, v in rank.counts.items()), key=lambda kv: -kv[1])),
        skipped=int(rank.skipped),
        has_shapes=has_shapes(rank),
        has_gpu=bool(len(rank.gpu)),
        cpu=cpu_ops(rank),
        origin_us=int(meta.origin_us),
    )


def device_label(device: Device | None, facts: TraceFacts) -> str | None:
    """The one device name every command shows: the device table's name when matched, else the
    trace's, with the memory size the trace reports ('NVIDIA H200 SXM 141GB (150 GB reported)')."""
    mem = f" ({fmt_bytes(facts.device_memory_bytes)} reported)" if facts.device_memory_bytes else ""
    if device is not None:
        return device.name + mem
    return facts.device_name + mem if facts.device_name else None
