"""The memory view (profile_memory traces) for the terminal and the report: peaks, churn, what holds the peak."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.analyzers.memory import BYTES, MemoryView
from tracekit.units import DASH, fmt_bytes, fmt_int, plural

MAX_STEP_ROWS = 40


def _estimate(m: MemoryView) -> str:
    factor = m.batch_factor
    if factor is None:
        return ""
    times = f"{factor:.1f}" if factor < 10 else fmt_int(round(factor))
    return (f"estimate: a batch about {times}× this one would peak near the device's memory (the memory a "
            "step allocates and frees again grows with the batch; weights and optimizer state do not; "
            "activation checkpointing, fragmentation and workspaces make the real limit lower or higher)")


LARGER_BATCH_FACTOR = 2.0  # headroom for at least twice the batch: worth saying on a launch-bound step


def batch_hint(m: MemoryView, verdict: str | None) -> str:
    """On a launch-bound step with room for a much larger batch: the batch is the lever (the launches
    per step stay, the work per launch grows); '' otherwise."""
    factor = m.batch_factor
    if verdict != "launch-bound" or factor is None or factor < LARGER_BATCH_FACTOR:
        return ""
    return (f"the step is launch-bound with room for a batch about {factor:.1f}× larger (estimate): a larger batch "
            "(or batching requests) does more work per launch, so the launch overhead per sample falls")


def memory_lines(views: Sequence[MemoryView], multi: bool = False, verdict: str | None = None) -> list[str]:
    """The `tracekit analyze` lines of each rank's memory view (none without [memory] events)."""
    lines: list[str] = []
    for m in views:
        who = f"rank {m.rank}, " if multi else ""
        steps = m.headline_steps
        over = (f"largest of {plural(len(steps), 'step')} shown, in step {m.peak_step}"
                if m.peak_step >= 0 else "over the whole trace")
        reserved = f", {fmt_bytes(m.peak_reserved)} reserved" if m.peak_reserved is not None else ""
        device = ""
        if m.device_memory is not None:
            device = f"; of {fmt_bytes(m.device_memory)} on the device: {fmt_bytes(m.headroom)} headroom"
        relative = " (relative to the first event: the trace has no allocator totals)" if m.source == BYTES else ""
        allocations, allocated = m.churn()
        lines += ["", f"memory    {who}GPU {m.device_id}: peak {fmt_bytes(m.peak_allocated)} allocated{reserved} "
                      f"({over}){device}{relative}",
                  f"          per step: {fmt_int(allocations)} allocations, {fmt_bytes(allocated)} allocated "
                  "(allocator churn)"]
        if m.peak_ops:
            held = ", ".join(f"{o.op} {fmt_bytes(o.bytes)}" for o in m.peak_ops[:5])
            before = (f"; {fmt_bytes(m.unattributed_at_peak)} allocated before the recording"
                      if m.unattributed_at_peak > 0 else "")
            lines.append(f"          held at the peak by: {held}{before}")
        estimate = _estimate(m)
        if estimate:
            lines.append(f"          {estimate}")
        hint = batch_hint(m, verdict)
        if hint:
            lines.append(f"          {hint}")
    return lines


@dataclass(frozen=True)
class MemoryCard:
    """The report's memory card, formatted."""

    tiles: tuple[tuple[str, str, str], ...]  # (label, value, sub)
    steps: tuple[tuple[str, ...], ...]  # step, peak allocated, peak reserved, at start, allocations, allocated
    ops: tuple[tuple[str, str, str], ...]  # op, bytes held at the peak, blocks
    estimate: str
    note: str
    hint: str = ""  # a launch-bound step with room for a larger batch (batch_hint)


def memory_card(m: MemoryView | None, verdict: str | None = None) -> MemoryCard | None:
    """The card of one rank's memory view (None: the trace has no GPU [memory] events)."""
    if m is None:
        return None
    allocations, allocated = m.churn()
    where = f"step {m.peak_step}" if m.peak_step >= 0 else "whole trace"
    tiles = [("Peak allocated", fmt_bytes(m.peak_allocated), f"largest step peak ({where})"),
             ("Peak reserved", fmt_bytes(m.peak_reserved) if m.peak_reserved is not None else DASH, "by the caching allocator")]
    if m.device_memory is not None:
        tiles.append(("Headroom", fmt_bytes(m.headroom), f"of {fmt_bytes(m.device_memory)} on the device"))
    tiles.append(("Allocations per step", fmt_int(allocations), f"{fmt_bytes(allocated)} allocated per step"))
    steps = tuple((str(s.step) if s.step >= 0 else "whole trace", fmt_bytes(s.peak_allocated),
                   fmt_bytes(s.peak_reserved) if s.peak_reserved is not None else DASH, fmt_bytes(s.start_allocated),
                   fmt_int(s.allocations), fmt_bytes(s.allocated_bytes), "" if s.steady else "left out")
                  for s in m.steps[:MAX_STEP_ROWS])
    ops = tuple((o.op, fmt_bytes(o.bytes), fmt_int(o.blocks)) for o in m.peak_ops)
    note = ("Levels rebuilt from each event's Bytes, relative to the first event (the trace has no allocator "
            "totals)." if m.source == BYTES else
            f"{fmt_bytes(m.unattributed_at_peak)} of the peak was allocated before the recording began "
            "(weights, optimizer state)." if m.unattributed_at_peak > 0 else "")
    return MemoryCard(tiles=tuple(tiles), steps=steps, ops=ops, estimate=_estimate(m), note=note,
                      hint=batch_hint(m, verdict))
