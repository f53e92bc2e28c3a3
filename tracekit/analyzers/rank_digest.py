"""One rank's compact numbers for the cross-rank view: per-step components and collective start times."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors import hostside
from tracekit.analyzers.kernels import COMMUNICATION
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

if TYPE_CHECKING:
    from tracekit.analyzers.analysis import RankAnalysis
    from tracekit.analyzers.launch import LaunchOverhead

# CPU-side collective ranges (gloo on CPU, or record_param_comms annotations) when no GPU comm kernel
CPU_COLLECTIVE = re.compile(r"^(?:gloo|nccl|mpi|ucc):([A-Za-z_]+)$")
_NCCL_PREFIX = re.compile(r"^(?:nccl(?:Dev)?Kernel_|ncclKernel)", re.IGNORECASE)
# per-step host-side and GPU components compared between a late rank and the median rank
HOST_COMPONENTS = ("dataloader_us", "sync_us", "cpu_launch_us", "cpu_ops_us")


@dataclass(frozen=True)
class StepDigest:
    """One step of one rank (µs; ts/end after the rank's `origin_us`)."""

    step: int
    phase: str  # 'steady' unless the steady-state analysis excluded it
    ts: float
    end: float
    span_us: float
    gpu_busy_us: float
    exposed_comm_us: float
    comm_us: float
    dataloader_us: float
    sync_us: float
    cpu_launch_us: float
    cpu_ops_us: float = 0.0  # top-level CPU ops (framework dispatch, CPU compute), summed over threads
    class_us: dict[str, float] = field(default_factory=dict)  # GPU time per kernel class (summed)


@dataclass(frozen=True)
class CollectiveDigest:
    """The n-th collective of one kind in one step of one rank (µs after the rank's `origin_us`)."""

    step: int
    kind: str  # 'AllReduce', 'all_reduce', ...
    index: int  # n-th of its kind in the step
    start: float
    end: float


@dataclass(frozen=True)
class RankDigest:
    """What the cross-rank view needs from one rank: no event tables, O(steps + collectives)."""

    rank: int
    path: str
    origin_us: int  # the file's clock (µs, integer): ranks line up on origin_us + ts
    verdict: str
    cause: str | None
    steps: tuple[StepDigest, ...]
    collectives: tuple[CollectiveDigest, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "verdict": self.verdict, "cause": self.cause,
                "steps": len(self.steps), "collectives": len(self.collectives)}


def collective_kind(name: str) -> str:
    """'ncclDevKernel_AllReduce_Sum_f32_RING_LL' -> 'AllReduce'; 'gloo:all_reduce' -> 'all_reduce'."""
    cpu = CPU_COLLECTIVE.match(name)
    if cpu:
        return cpu.group(1)
    rest = _NCCL_PREFIX.sub("", name)
    return rest.split("_", 1)[0].split("(", 1)[0] or name


def _per_step(table: pd.DataFrame, step_col: str, value_col: str) -> dict[int, float]:
    if not len(table):
        return {}
    return {int(k): float(v) for k, v in table.groupby(step_col)[value_col].sum().items()}


def _collectives(rank: RankTrace, classes: np.ndarray) -> tuple[CollectiveDigest, ...]:
    gpu = rank.gpu
    is_comm = classes == COMMUNICATION
    if is_comm.any():
        names = gpu[tables.GPU_NAME].to_numpy(dtype=object)[is_comm]
        ts = gpu[tables.GPU_TS].to_numpy(dtype=float)[is_comm]
        end = gpu[tables.GPU_END].to_numpy(dtype=float)[is_comm]
        step = gpu[tables.GPU_STEP].to_numpy()[is_comm]
    else:
        ann = rank.annotations
        if not len(ann):
            return ()
        keep = ann[tables.OP_NAME].astype(str).str.match(CPU_COLLECTIVE.pattern).to_numpy()
        names = ann[tables.OP_NAME].to_numpy(dtype=object)[keep]
        ts, end = ann[tables.OP_TS].to_numpy(dtype=float)[keep], ann[tables.OP_END].to_numpy(dtype=float)[keep]
        step = ann[tables.OP_STEP].to_numpy()[keep]
    order = np.lexsort((ts, step))
    seen: dict[tuple[int, str], int] = {}
    out = []
    for i in order.tolist():
        s = int(step[i])
        if s < 0:
            continue
        kind = collective_kind(str(names[i]))
        n = seen.get((s, kind), 0)
        seen[(s, kind)] = n + 1
        out.append(CollectiveDigest(step=s, kind=kind, index=n, start=float(ts[i]), end=float(end[i])))
    return tuple(out)


def _phases(launch: LaunchOverhead) -> dict[int, str]:
    """Step -> 'steady' for the steps the headline covers (launch.selected: the steady ones, or what
    --steps picked), else its phase (setup, partial, outlier...)."""
    steps = [int(s) for s in launch.steps["step"].tolist()]
    selected = launch.selected or (True,) * len(steps)
    phases = launch.phases
    names = [p.phase for p in phases] if len(phases) == len(steps) else ["excluded"] * len(steps)
    return {s: "steady" if keep else name for s, keep, name in zip(steps, selected, names, strict=True)}


def rank_digest(rank: RankTrace, result: RankAnalysis, verdict: str, cause: str | None = None) -> RankDigest:
    """The digest of one rank from its analysis (`result`): per-step numbers and collectives.

    Times stay relative to the rank's own `origin_us` (kept exact, as an integer) so that ranks
    analysed in different processes line up in `ranks.cross_rank`."""
    lo = result.launch
    classes = result.classification.table["class"].to_numpy(dtype=object)
    patterns = result.patterns
    if patterns is not None:
        dataloader, comm = patterns.dataloader, patterns.comm
    else:
        dataloader, comm = hostside.find_dataloader(rank), hostside.find_comm(rank, classes)
    dl = _per_step(dataloader, hostside.DL_STEP, hostside.DL_US)
    exposed = _per_step(comm, hostside.CM_STEP, hostside.CM_EXPOSED_US)
    comm_us = _per_step(comm, hostside.CM_STEP, hostside.CM_COMM_US)
    gpu_step = rank.gpu[tables.GPU_STEP].to_numpy() if len(rank.gpu) else np.empty(0, int)
    dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float) if len(rank.gpu) else np.empty(0)
    by_class: dict[int, dict[str, float]] = {}
    for (st, c), v in pd.DataFrame({"s": gpu_step, "c": classes, "d": dur}).groupby(["s", "c"])["d"].sum().items():
        by_class.setdefault(int(st), {})[str(c)] = float(v)
    phases = _phases(lo)
    ops = rank.ops
    top_ops = ops[ops[tables.OP_PARENT].to_numpy() < 0] if len(ops) else ops
    cpu_ops = _per_step(top_ops.assign(d=top_ops[tables.OP_END] - top_ops[tables.OP_TS]), tables.OP_STEP, "d") if len(ops) else {}
    steps = []
    for row in lo.steps.to_dict("records"):
        s = int(row["step"])
        cls = by_class.get(s, {}) if s >= 0 else {}
        steps.append(StepDigest(
            step=s, phase=phases.get(s, "steady"), ts=float(row["ts"]),
            end=float(row["end"]), span_us=float(row["span_us"]),
            gpu_busy_us=float(row["gpu_busy_us"]), exposed_comm_us=exposed.get(s, 0.0),
            comm_us=comm_us.get(s, 0.0), dataloader_us=dl.get(s, 0.0), sync_us=float(row["sync_us"]),
            cpu_launch_us=float(row["cpu_launch_us"]), cpu_ops_us=cpu_ops.get(s, 0.0), class_us=cls))
    return RankDigest(rank=int(rank.rank), path=str(rank.path), origin_us=int(rank.meta.origin_us),
                      verdict=verdict, cause=cause, steps=tuple(steps), collectives=_collectives(rank, classes))
