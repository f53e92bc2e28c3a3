"""GPU memory per step from profile_memory traces: peak allocated/reserved, allocator churn, what is alive at the peak."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.step_plan import StepPlan
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

ALLOCATOR = "allocator"  # levels are the allocator's own Total Allocated / Total Reserved, as written
BYTES = "bytes"  # levels rebuilt from the Bytes of each event, relative to the first (older schemas)
TOP_OPS = 8  # ops listed with what they hold at the peak
NO_OP = "(no op)"
# ops that only allocate on behalf of the op around them: a block is credited to that op instead
ALLOCATING_OPS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                            "aten::new_empty_strided", "aten::resize_", "aten::zeros", "aten::zeros_like",
                            "aten::ones", "aten::ones_like", "aten::full", "aten::new_zeros"})


@dataclass(frozen=True)
class MemoryStep:
    """One step's memory: its peak, where it started, and the allocator's churn."""

    step: int
    steady: bool  # one of the steps the headline covers
    peak_allocated: float  # bytes
    peak_reserved: float | None  # bytes (None: the trace has no Total Reserved)
    start_allocated: float  # allocated when the step began
    allocations: int
    allocated_bytes: float  # bytes allocated in the step (sum over its allocations)
    freed_bytes: float
    low_allocated: float = 0.0  # the least allocated in the step (its start included): what stays between steps

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "steady": self.steady, "peak_allocated": self.peak_allocated,
                "peak_reserved": self.peak_reserved, "start_allocated": self.start_allocated,
                "allocations": self.allocations, "allocated_bytes": self.allocated_bytes,
                "freed_bytes": self.freed_bytes, "low_allocated": self.low_allocated}


@dataclass(frozen=True)
class PeakOp:
    """An op and the bytes its allocations still hold at the peak."""

    op: str
    bytes: float
    blocks: int  # live blocks it allocated

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "bytes": self.bytes, "blocks": self.blocks}


@dataclass(frozen=True)
class MemoryView:
    """One rank's GPU memory over its steps (from [memory] events of one device)."""

    rank: int
    device_id: int
    source: str  # ALLOCATOR | BYTES
    events: int  # [memory] events of the device
    steps: tuple[MemoryStep, ...]
    peak_allocated: float  # over the headline steps (every step when none is marked)
    peak_reserved: float | None
    peak_step: int  # the step of the peak (-1: no steps)
    peak_ops: tuple[PeakOp, ...]  # largest first
    unattributed_at_peak: float  # bytes at the peak allocated before the recording began (weights...)
    device_memory: float | None  # the device's memory (deviceProperties.totalGlobalMem), bytes

    @property
    def headline_steps(self) -> tuple[MemoryStep, ...]:
        return tuple(s for s in self.steps if s.steady) or self.steps

    @property
    def headroom(self) -> float | None:
        """Device memory not reserved (or, without reserved totals, not allocated) at the peak."""
        if self.device_memory is None:
            return None
        used = self.peak_reserved if self.peak_reserved is not None else self.peak_allocated
        return self.device_memory - used

    @property
    def floor_allocated(self) -> float:
        """The least allocated over the headline steps: the memory that stays from step to step
        (weights, gradients kept, optimizer state), wherever the step boundaries fall."""
        return min((s.low_allocated for s in self.headline_steps), default=0.0)

    @property
    def batch_factor(self) -> float | None:
        """An estimate of how many times larger the batch could be before the peak reaches the device's
        memory: the memory the peak step holds above the floor (floor_allocated: weights, optimizer
        state) is taken to grow with the batch and the floor not; the allocator's overhead (reserved /
        allocated at the peak) is kept. The floor, not the step's start: where the steps are inferred
        (no ProfilerStep marks) a step can start with the last one's activations still held. None
        without the device's memory or a transient."""
        if self.device_memory is None or self.source != ALLOCATOR:
            return None
        peak = next((s for s in self.steps if s.step == self.peak_step), None)
        if peak is None:
            return None
        floor = min(self.floor_allocated, peak.start_allocated)
        transient = peak.peak_allocated - floor
        overhead = (peak.peak_reserved / peak.peak_allocated
                    if peak.peak_reserved and peak.peak_allocated > 0 else 1.0)
        if transient <= 0:
            return None
        return max((self.device_memory / max(overhead, 1.0) - floor) / transient, 0.0)

    def churn(self) -> tuple[float, float]:
        """(allocations, bytes allocated) per headline step."""
        steps = self.headline_steps
        n = max(len(steps), 1)
        return sum(s.allocations for s in steps) / n, sum(s.allocated_bytes for s in steps) / n

    def to_dict(self) -> dict[str, Any]:
        allocations, allocated = self.churn()
        return {"rank": self.rank, "device_id": self.device_id, "source": self.source, "events": self.events,
                "peak_allocated": self.peak_allocated, "peak_reserved": self.peak_reserved,
                "peak_step": self.peak_step, "device_memory": self.device_memory, "headroom": self.headroom,
                "batch_factor_estimate": self.batch_factor, "floor_allocated": self.floor_allocated,
                "allocations_per_step": allocations,
                "allocated_bytes_per_step": allocated, "unattributed_at_peak": self.unattributed_at_peak,
                "peak_ops": [o.to_dict() for o in self.peak_ops], "steps": [s.to_dict() for s in self.steps]}


def _device_rows(mem: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Rows of the GPU device with the most [memory] events, and its id (empty, -1: none)."""
    types = mem[tables.MEM_DEVICE_TYPE].to_numpy()
    gpu = np.isin(types, tables.GPU_DEVICE_TYPES)
    if not gpu.any():
        return np.zeros(0, dtype=np.int64), -1
    ids = mem[tables.MEM_DEVICE_ID].to_numpy()
    values, counts = np.unique(ids[gpu], return_counts=True)
    device = int(values[np.argmax(counts)])
    return np.flatnonzero(gpu & (ids == device)), device


def _live_at(addr: np.ndarray, size: np.ndarray, op: np.ndarray, upto: int) -> dict[int, tuple[float, int]]:
    """Blocks allocated in events [0, upto] and not freed by then: address -> (bytes, op row)."""
    live: dict[int, tuple[float, int]] = {}
    for a, b, o in zip(addr[:upto + 1].tolist(), size[:upto + 1].tolist(), op[:upto + 1].tolist(), strict=True):
        if b > 0 and a >= 0:
            live[a] = (b, o)
        elif b < 0:
            live.pop(a, None)
    return live


def memory_view(rank: RankTrace, plan: StepPlan | None = None) -> MemoryView | None:
    """The GPU memory of `rank` per step of `plan` (its windows; steady = the steps it selects), or
    over the whole recording as one step without a plan; None when the trace has no GPU [memory]
    events (recorded without profile_memory=True)."""
    mem = rank.memory
    if len(mem) == 0:
        return None
    rows, device = _device_rows(mem)
    if not len(rows):
        return None
    ts = mem[tables.MEM_TS].to_numpy(dtype=float)[rows]
    size = np.nan_to_num(mem[tables.MEM_BYTES].to_numpy(dtype=float)[rows])
    allocated = mem[tables.MEM_ALLOCATED].to_numpy(dtype=float)[rows]
    reserved = mem[tables.MEM_RESERVED].to_numpy(dtype=float)[rows]
    source = ALLOCATOR if np.isfinite(allocated).all() else BYTES
    level = allocated if source == ALLOCATOR else np.cumsum(size)
    start_level = level[0] - size[0]  # before the first event
    has_reserved = source == ALLOCATOR and bool(np.isfinite(reserved).all())
    if plan is not None and len(plan.windows):
        windows = list(zip(plan.windows.numbers.tolist(), plan.windows.ts.tolist(), plan.windows.end.tolist(),
                           plan.selected.tolist(), strict=True))
    else:
        windows = [(-1, float(ts[0]), float(ts[-1]), True)]
    steps, peak_index = [], {}
    for number, w0, w1, steady in windows:
        lo = int(np.searchsorted(ts, w0, side="left"))
        hi = int(np.searchsorted(ts, w1, side="right"))
        before = float(level[lo - 1]) if lo > 0 else float(start_level)
        inside = level[lo:hi]
        top = int(np.argmax(inside)) if len(inside) else -1
        peak = max(before, float(inside[top])) if len(inside) else before
        peak_index[number] = lo + top if len(inside) and inside[top] >= before else lo - 1
        res = reserved[max(lo - 1, 0):hi] if has_reserved else np.zeros(0)
        chunk = size[lo:hi]
        low = min(before, float(inside.min())) if len(inside) else before
        steps.append(MemoryStep(step=int(number), steady=bool(steady), peak_allocated=peak,
                                peak_reserved=float(res.max()) if len(res) else None, start_allocated=before,
                                allocations=int((chunk > 0).sum()), allocated_bytes=float(chunk[chunk > 0].sum()),
                                freed_bytes=float(-chunk[chunk < 0].sum()) + 0.0, low_allocated=low))
    head = [s for s in steps if s.steady] or steps
    best = max(head, key=lambda s: s.peak_allocated)
    reserved_peaks = [s.peak_reserved for s in head if s.peak_reserved is not None]
    at = peak_index[best.step]
    addr = mem[tables.MEM_ADDR].to_numpy()[rows]
    op = mem[tables.MEM_OP].to_numpy()[rows]
    live = _live_at(addr, size, op, at) if at >= 0 else {}
    names = rank.ops[tables.OP_NAME].to_numpy(dtype=object)
    parents = rank.ops[tables.OP_PARENT].to_numpy() if tables.OP_PARENT in rank.ops else np.full(len(names), -1)
    by_op: dict[str, list[float]] = {}
    for b, o in live.values():
        while 0 <= o < len(names) and names[o] in ALLOCATING_OPS and parents[o] >= 0:
            o = int(parents[o])
        entry = by_op.setdefault(str(names[o]) if 0 <= o < len(names) else NO_OP, [0.0, 0])
        entry[0] += b
        entry[1] += 1
    top_ops = sorted((PeakOp(k, v[0], int(v[1])) for k, v in by_op.items()), key=lambda p: -p.bytes)[:TOP_OPS]
    held = sum(v[0] for v in by_op.values())
    props = rank.meta.device or {}
    total = props.get("totalGlobalMem")
    return MemoryView(
        rank=int(rank.rank), device_id=device, source=source, events=len(rows), steps=tuple(steps),
        peak_allocated=best.peak_allocated, peak_reserved=max(reserved_peaks) if reserved_peaks else None,
        peak_step=best.step, peak_ops=tuple(top_ops),
        unattributed_at_peak=max(best.peak_allocated - held, 0.0) if source == ALLOCATOR else 0.0,
        device_memory=float(total) if isinstance(total, (int, float)) and total > 0 else None)
