"""What a trace can support: an audit run before the verdict (missing GPU activity, clock offsets, queued idle, idle recordings, dropped events, cut steps)."""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from tracekit.analyzers import names
from tracekit.analyzers.idle import LAUNCH_LATENCY_US
from tracekit.analyzers.steady import PARTIAL
from tracekit.analyzers.step_plan import StepPlan
from tracekit.analyzers.windows import SCOPE_STEPS
from tracekit.trace import tables
from tracekit.trace.intervals import busy_in_windows, merge_intervals
from tracekit.trace.model import RankTrace
from tracekit.units import fmt_us, plural

ERROR = "error"  # the trace cannot support a verdict: the verdict is `undetermined`
WARNING = "warning"  # the numbers stand, but part of the trace is missing or doubtful
INFO = "info"  # what the analysis left out, and why
SEVERITIES = (ERROR, WARNING, INFO)

GPU_MISSING = "gpu_activity_missing"
CLOCK_OFFSET = "clock_offset"
QUEUED_IDLE = "queued_idle"
IDLE_RECORDING = "idle_recording"
DROPPED = "dropped_events"
CUT_STEP = "cut_step"

MIN_LAUNCHES = 10  # launch calls before missing kernels mean the activity was not recorded
# Kernels that follow a GPU idle gap start this soon after their launch call returns when the
# clocks agree; when even the earliest of them starts OFFSET_US or more after (or any start
# before their launch call began) the CPU and GPU clocks disagree.
OFFSET_US = 1000.0
EARLY_TOL_US = 5.0  # a kernel starting this much before its launch call began: clocks disagree
GAP_US = 100.0  # an idle gap that long or longer is one the next kernel can follow from an idle GPU
STALL_US = 1000.0  # a queued idle gap (next kernel launched, nothing running) at least this long
QUEUED_SHARE = 0.05  # of the recording's GPU window: queued idle worth a finding
WAIT_US = 100_000.0  # an idle wait worth naming in a recording (a server waiting for requests)
IDLE_SHARE = 0.5  # idle waits hold at least this share of the recording: it is mostly waiting
DROP_SHARE = 0.02  # kernel launch calls without their kernel (or kernels without their launch)
DROP_ERROR_SHARE = 0.5
MIN_DROPS = 5
CAPTURE_BEGIN = re.compile(r"StreamBeginCapture")
CAPTURE_END = re.compile(r"StreamEndCapture")


@dataclass(frozen=True)
class Finding:
    """One thing the trace cannot fully support: `code` (the constants above), `severity`
    (SEVERITIES), one sentence, the µs it concerns (0 where it is a count), the rank."""

    code: str
    severity: str
    message: str
    value_us: float = 0.0
    rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "value_us": self.value_us, "rank": self.rank}


@dataclass(frozen=True)
class Integrity:
    """The audit of one or more ranks: findings (errors first), and the estimated clock offset
    (GPU minus CPU, µs; None when the launches and kernels do not show one)."""

    findings: tuple[Finding, ...] = ()
    clock_offset_us: float | None = None

    def __add__(self, other: Integrity) -> Integrity:
        offset = self.clock_offset_us if self.clock_offset_us is not None else other.clock_offset_us
        return Integrity(_ordered(self.findings + other.findings), offset)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == ERROR)

    @property
    def undetermined(self) -> str:
        """Why the trace cannot support a verdict ("" when it can): the errors' sentences."""
        return "; ".join(dict.fromkeys(f.message for f in self.errors))

    @property
    def serious(self) -> tuple[Finding, ...]:
        """The errors and warnings (what the report shows; notes stay in text and JSON)."""
        return tuple(f for f in self.findings if f.severity != INFO)

    @property
    def line(self) -> str:
        """One line for text and the report: 'ok' or the findings by severity."""
        if not self.findings:
            return "ok: launches, kernels and clocks agree"
        return " | ".join(f"{f.severity}: {f.message}" for f in self.findings)

    def to_list(self) -> list[dict[str, Any]]:
        """The document's `integrity` list."""
        return [f.to_dict() for f in self.findings]


def _ordered(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.rank)))


def combine_integrity(parts: Sequence[Integrity | None]) -> Integrity | None:
    """The audits added up (None when none is given)."""
    given = [p for p in parts if p is not None]
    return reduce(operator.add, given) if given else None


def _capture_mask(rank: RankTrace, ts: np.ndarray) -> np.ndarray:
    """Runtime rows inside stream-capture windows (launches recorded into a graph run no kernel)."""
    rt = rank.runtime
    marks = names.labels(rt[tables.RT_NAME], ((CAPTURE_BEGIN, "begin"), (CAPTURE_END, "end")))
    begins = rt[tables.RT_TS].to_numpy(dtype=float)[marks == "begin"]
    ends = rt[tables.RT_END].to_numpy(dtype=float)[marks == "end"]
    out = np.zeros(len(ts), dtype=bool)
    for b in np.sort(begins).tolist():
        later = ends[ends >= b]
        e = float(later.min()) if len(later) else np.inf
        out |= (ts >= b) & (ts <= e)
    return out


def _launch_checks(rank: RankTrace, r: int) -> list[Finding]:
    """Missing GPU activity and dropped events, from kernel launch calls vs kernels."""
    rt, gpu = rank.runtime, rank.gpu
    if not len(rt):
        return []
    kind = rt[tables.RT_KIND].to_numpy(dtype=object)
    ts = rt[tables.RT_TS].to_numpy(dtype=float)
    is_launch = (kind == tables.KIND_KERNEL) & ~_capture_mask(rank, ts)
    n_launch = int(is_launch.sum())
    if not len(gpu):
        if n_launch >= MIN_LAUNCHES:
            return [Finding(GPU_MISSING, ERROR, f"GPU activity was not recorded: {n_launch:,} kernel launch calls "
                            "but no kernels (CUPTI/roctracer activity off, or its buffer dropped)", 0.0, r)]
        return []
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    g_end = gpu[tables.GPU_END].to_numpy(dtype=float)
    linked = np.zeros(len(rt), dtype=bool)
    linked[launch[launch >= 0]] = True
    before_end = ts < float(g_end.max())  # launches after the last GPU activity: cut by the end
    missing = int((is_launch & ~linked & before_end).sum())
    out: list[Finding] = []
    base = int((is_launch & before_end).sum())
    if base and missing >= MIN_DROPS and missing >= DROP_SHARE * base:
        severity = ERROR if missing >= DROP_ERROR_SHARE * base else WARNING
        out.append(Finding(DROPPED, severity, f"{missing:,} of {base:,} kernel launch calls have no kernel in the trace "
                           f"({100 * missing / base:.0f} %): GPU events were dropped (activity buffer overflow)", 0.0, r))
    kernels = gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    graph = gpu[tables.GPU_GRAPH].to_numpy() >= 0 if tables.GPU_GRAPH in gpu else np.zeros(len(gpu), dtype=bool)
    orphan = int((kernels & (launch < 0) & ~graph).sum())
    if n_launch and orphan >= MIN_DROPS and orphan >= DROP_SHARE * int(kernels.sum()):
        out.append(Finding(DROPPED, WARNING, f"{orphan:,} kernels have no launch call in the trace (correlation gaps: "
                           "runtime events dropped, or work launched outside the profiled threads)", 0.0, r))
    tail = int((is_launch & ~before_end).sum())
    if tail:
        out.append(Finding(CUT_STEP, INFO, f"{tail:,} kernel launch calls after the last recorded GPU activity: "
                           "the recording stopped before they ran", 0.0, r))
    return out


def _gaps(rank: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, next activity row, queued part) of the GPU's idle gaps (all streams), the
    recording's start included; the queued part is what follows the next activity's launch call
    (plus the launch latency): the GPU idled with that work already launched."""
    gpu, rt = rank.gpu, rank.runtime
    g_ts, g_end = gpu[tables.GPU_TS].to_numpy(dtype=float), gpu[tables.GPU_END].to_numpy(dtype=float)
    starts, ends = merge_intervals(g_ts, g_end)
    first = min(float(g_ts.min()), float(rt[tables.RT_TS].min()) if len(rt) else np.inf)
    a = np.concatenate([[first], ends[:-1]])
    b = starts
    order = np.argsort(g_ts, kind="stable")
    k = np.searchsorted(g_ts[order], b, side="left")
    nxt = order[np.minimum(k, len(order) - 1)]
    launch = gpu[tables.GPU_LAUNCH].to_numpy()[nxt]
    l_end = rt[tables.RT_END].to_numpy(dtype=float)[np.maximum(launch, 0)] if len(rt) else np.full(len(nxt), np.inf)
    part = np.where(launch >= 0, np.clip(b - np.maximum(a, l_end + LAUNCH_LATENCY_US), 0.0, None), 0.0)
    return a, b, nxt, part


def _clock_checks(rank: RankTrace, r: int) -> tuple[list[Finding], float | None, float]:
    """Clock offset and queued idle: (findings, offset estimate, queued idle µs)."""
    gpu, rt = rank.gpu, rank.runtime
    if not len(gpu) or not len(rt):
        return [], None, 0.0
    launch = gpu[tables.GPU_LAUNCH].to_numpy()
    g_ts = gpu[tables.GPU_TS].to_numpy(dtype=float)
    has = launch >= 0
    if not has.any():
        return [], None, 0.0
    l_ts = rt[tables.RT_TS].to_numpy(dtype=float)[np.maximum(launch, 0)]
    l_end = rt[tables.RT_END].to_numpy(dtype=float)[np.maximum(launch, 0)]
    out: list[Finding] = []
    early = has & (g_ts < l_ts - EARLY_TOL_US)
    if int(early.sum()) >= max(3, int(0.01 * has.sum())):
        lead = float(np.max(l_ts[early] - g_ts[early]))
        out.append(Finding(CLOCK_OFFSET, ERROR, f"{int(early.sum()):,} GPU activities start before their launch calls "
                           f"(by up to {fmt_us(lead)}): the CPU and GPU clocks are offset by about {fmt_us(lead)}",
                           lead, r))
        return out, -lead, 0.0
    a, b, nxt, part = _gaps(rank)
    follow = has[nxt] & ((b - a) >= GAP_US)
    follow[0] = bool(has[nxt[0]])
    offset = None
    if follow.sum() >= 2:
        delay = g_ts[nxt][follow] - l_end[nxt][follow]
        if float(delay.min()) >= OFFSET_US:
            offset = float(delay.min())
            out.append(Finding(CLOCK_OFFSET, ERROR, f"every kernel that follows an idle GPU starts {fmt_us(offset)} or "
                               f"more after its launch call: the GPU clock is about {fmt_us(offset)} ahead of the "
                               "CPU's (or the work ran outside the trace)", offset, r))
            return out, offset, 0.0
    queued = part >= STALL_US
    queued_us = float(part[queued].sum())
    window = float(gpu[tables.GPU_END].max() - a[0])
    if queued_us >= QUEUED_SHARE * window and queued.any():
        longest = float(part[queued].max())
        out.append(Finding(QUEUED_IDLE, WARNING, f"kernels start long after their launch with nothing recorded running: "
                           f"the GPU idles {fmt_us(queued_us)} ({100 * queued_us / window:.0f} % of the recording) in "
                           f"{int(queued.sum())} gap{'s' if queued.sum() > 1 else ''} (longest {fmt_us(longest)}) with its "
                           "next kernel already launched: work outside the trace, another process, a cross-stream wait "
                           "or a clock offset", queued_us, r))
    return out, offset, queued_us


def _idle_checks(rank: RankTrace, plan: StepPlan | None, r: int) -> list[Finding]:
    """A recording that is mostly idle waits: name them and say whether the analysed steps hold them."""
    gpu = rank.gpu
    if not len(gpu):
        return []
    a, b, _, part = _gaps(rank)
    end = float(gpu[tables.GPU_END].max())
    window = end - float(a[0])
    wait = ((b - a) >= WAIT_US) & (part < 0.5 * (b - a))  # host-side waits: nothing launched yet
    wait_us = float((b - a)[wait].sum())
    if window <= 0 or wait_us < IDLE_SHARE * window:
        return _left_out(a[wait], b[wait], plan, r)
    n = int(wait.sum())
    text = (f"the recording is mostly idle waits: the GPU idles {fmt_us(wait_us)} of {fmt_us(window)} "
            f"({100 * wait_us / window:.0f} %) in {n} wait{'s' if n > 1 else ''} of {fmt_us(WAIT_US)} or more "
            f"(longest {fmt_us(float((b - a)[wait].max()))}, a server waiting for requests or a host stall); "
            f"the GPU work sits in {plural(_active_windows(a, b, wait, end), 'active window')} "
            f"({fmt_us(window - wait_us)})")
    if plan is None or not len(plan):
        return [Finding(IDLE_RECORDING, WARNING, text, wait_us, r)]
    sel = plan.selected
    w0, w1 = plan.windows.ts[sel], plan.windows.end[sel]
    span = float((w1 - w0).sum())
    inside = float(busy_in_windows(*merge_intervals(a[wait], b[wait]), w0, w1).sum()) if span > 0 else 0.0
    if span > 0 and inside >= IDLE_SHARE * span:
        # steps the trace marks (ProfilerStep) are the user's: their waits are part of the step;
        # a window tracekit chose that is mostly one wait is no step at all
        marked = plan.scope == SCOPE_STEPS
        return [Finding(IDLE_RECORDING, WARNING if marked else ERROR,
                        f"{text}; the analysed {'steps are' if marked else 'window is'} {100 * inside / span:.0f} % "
                        f"idle wait{'' if marked else ' (mark the work with ProfilerStep steps)'}", wait_us, r)]
    left = max(window - span, 0.0)
    return [Finding(IDLE_RECORDING, INFO, f"{text}; the analysis covers {plural(int(sel.sum()), 'step')} "
                    f"({fmt_us(span)}) and leaves out {fmt_us(left)}", wait_us, r)]


def _left_out(a: np.ndarray, b: np.ndarray, plan: StepPlan | None, r: int) -> list[Finding]:
    """In a recording that is mostly work: the idle waits [a, b) of WAIT_US or more that lie outside
    the analysed steps (a note: the numbers stand, and leave them out)."""
    if plan is None or not len(plan) or not len(a):
        return []
    sel = plan.selected
    covered = busy_in_windows(*merge_intervals(plan.windows.ts[sel], plan.windows.end[sel]), a, b)
    outside = (b - a) - covered
    left = outside >= WAIT_US
    if not left.any():
        return []
    us, n = float(outside[left].sum()), int(left.sum())
    return [Finding(IDLE_RECORDING, INFO, f"{'an idle wait' if n == 1 else f'{n} idle waits'} of {fmt_us(us)} "
                    f"(the GPU idle with nothing launched) "
                    f"{'lies' if n == 1 else 'lie'} outside the analysed steps, which leave {'it' if n == 1 else 'them'} out",
                    us, r)]


def _active_windows(a: np.ndarray, b: np.ndarray, wait: np.ndarray, end: float) -> int:
    """How many stretches of the recording lie between the waits and hold GPU work."""
    starts = np.concatenate([[a[0]], b[wait]])  # the recording's start, then each wait's end
    stops = np.concatenate([a[wait], [end]])  # each wait's start, then the last activity's end
    return int(((stops - starts) > 0).sum())


def _cut_checks(plan: StepPlan | None, r: int) -> list[Finding]:
    if plan is None or not plan.phases or plan.phases[-1].phase != PARTIAL:
        return []
    p = plan.phases[-1]
    kept = bool(plan.selected[-1])
    return [Finding(CUT_STEP, WARNING if kept else INFO, f"step {p.step} is cut by the recording's end"
                    + (", counted in the headline" if kept else ", left out"), 0.0, r)]


def audit(rank: RankTrace, plan: StepPlan | None = None) -> Integrity:
    """What `rank` can support (see the module constants): GPU activity missing, CPU/GPU clock
    offset (estimated from the kernels that follow an idle GPU), queued idle with nothing recorded
    running, a recording that is mostly idle waits (and whether the plan's selected steps hold
    them), dropped events, and steps or launches cut by the recording's end."""
    r = int(rank.rank)
    findings = _launch_checks(rank, r)
    clock, offset, _ = _clock_checks(rank, r)
    findings += clock
    if not any(f.code == CLOCK_OFFSET for f in clock):
        findings += _idle_checks(rank, plan, r)
    findings += _cut_checks(plan, r)
    return Integrity(_ordered(findings), offset)
