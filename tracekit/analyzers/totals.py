"""Additive launch/idle totals of steps and ranks, and the verdict that names the bottleneck from them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tracekit.analyzers.kernels import COMMUNICATION  # the cause: exposed communication kernels
from tracekit.units import fmt_us

CPU_ONLY = "cpu-only"
GPU_BOUND = "gpu-bound"
LAUNCH_BOUND = "launch-bound"  # the CPU cannot launch kernels as fast as the GPU runs them
HOST_BOUND = "host-bound"  # the GPU waits for other host work (see CAUSES)
COMM_BOUND = "communication-bound"  # collectives run with no compute beside them
MIXED = "mixed"  # no single cause holds most of the time the GPU is not computing
UNDETERMINED = "undetermined"  # the trace cannot support a verdict (integrity audit, or unexplained idle)
VERDICTS = (LAUNCH_BOUND, GPU_BOUND, HOST_BOUND, COMM_BOUND, MIXED, CPU_ONLY, UNDETERMINED)

# Causes of time the GPU does not compute, and the verdict each leads to when it dominates.
LAUNCH = "launch"
DATA_LOADING = "data_loading"
SYNC = "sync"
COPIES = "copies"
CPU_WORK = "cpu_work"
UNEXPLAINED = "unexplained"  # GPU idle with its next kernel launched and nothing recorded running
CAUSES = (LAUNCH, DATA_LOADING, SYNC, COPIES, CPU_WORK, COMMUNICATION, UNEXPLAINED)
CAUSE_VERDICT = {LAUNCH: LAUNCH_BOUND, COMMUNICATION: COMM_BOUND, UNEXPLAINED: UNDETERMINED}  # the rest: HOST_BOUND
CAUSE_WORDS = {
    LAUNCH: "waiting for kernel launches",
    DATA_LOADING: "waiting for the DataLoader on the main thread",
    SYNC: "drained by host syncs (.item(), .cpu(), synchronize)",
    COPIES: "in or blocked by copies from pageable host memory",
    CPU_WORK: "waiting while the CPU runs Python or CPU ops",
    COMMUNICATION: "in collectives with no compute beside them",
    UNEXPLAINED: "idle with its next kernel already launched and nothing recorded running",
}

GPU_BOUND_SHARE = 0.80  # gpu-bound: the GPU computes (or waits only on itself) ≥ 80 % of the span
BUSY_SHARE = 0.50  # ... and is busy with its own kernels for most of the span
DOMINANT_SHARE = 0.50  # a cause names the verdict when it holds ≥ 50 % of the rest of the span


@dataclass(frozen=True)
class LaunchTotals:
    """Additive launch and idle numbers of one step, one rank, or several ranks (``a + b``)."""

    steps: int = 0
    kernels: int = 0
    gpu_ops: int = 0  # kernels + memcpy + memset
    launches: int = 0
    cpu_launch_us: float = 0.0
    syncs: int = 0
    sync_us: float = 0.0
    span_us: float = 0.0
    gpu_busy_us: float = 0.0
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_idle_us: float = 0.0
    short_kernels: int = 0
    # the idle split of tracekit.analyzers.idle, and busy time the host or other ranks hold back
    gpu_gap_us: float = 0.0
    launch_gap_us: float = 0.0
    data_wait_us: float = 0.0
    sync_wait_us: float = 0.0
    copy_wait_us: float = 0.0
    cpu_wait_us: float = 0.0
    pageable_copy_us: float = 0.0
    comm_exposed_us: float = 0.0
    p2p_exposed_us: float = 0.0  # the part of comm_exposed_us in point-to-point transfers (pipeline bubbles)
    unexplained_us: float = 0.0  # GPU-side gaps over idle.STALL_US: nothing recorded held the GPU
    undetermined: str = ""  # why the trace cannot support a verdict ("" when it can): the integrity audit's reason

    def __add__(self, other: LaunchTotals) -> LaunchTotals:
        out = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "undetermined"}
        reasons = [r for r in (self.undetermined, other.undetermined) if r]
        return LaunchTotals(**out, undetermined="; ".join(dict.fromkeys(reasons)))

    @property
    def gpu_idle_us(self) -> float:
        return max(self.span_us - self.gpu_busy_us, 0.0)

    @property
    def gpu_util(self) -> float | None:
        return self.gpu_busy_us / self.span_us if self.span_us > 0 else None

    @property
    def kernels_per_step(self) -> float | None:
        return self.kernels / self.steps if self.steps else None

    @property
    def own_busy_us(self) -> float:
        """GPU busy time that is the GPU's own work: less pageable copies and exposed communication."""
        return max(self.gpu_busy_us - self.pageable_copy_us - self.comm_exposed_us, 0.0)

    @property
    def compute_us(self) -> float:
        """GPU time that is the GPU's own: `own_busy_us` plus the short GPU-side gaps between
        already-launched kernels (dispatch, at most idle.STALL_US each). Longer queued gaps are
        `unexplained_us`, never GPU time."""
        return self.own_busy_us + self.gpu_gap_us

    def causes(self) -> dict[str, float]:
        """µs of the span each cause holds (CAUSES order)."""
        return {LAUNCH: self.launch_gap_us, DATA_LOADING: self.data_wait_us, SYNC: self.sync_wait_us,
                COPIES: self.copy_wait_us + self.pageable_copy_us, CPU_WORK: self.cpu_wait_us,
                COMMUNICATION: self.comm_exposed_us, UNEXPLAINED: self.unexplained_us}

    def parts(self) -> dict[str, float]:
        """The step's span in parts that add up to it: GPU busy, then each named idle cause, then
        `unexplained` (queued gaps with nothing recorded running, plus whatever idle time no cause
        names: never absorbed into another part)."""
        named = {"gpu_gaps": self.gpu_gap_us, LAUNCH: self.launch_gap_us, DATA_LOADING: self.data_wait_us,
                 SYNC: self.sync_wait_us, COPIES: self.copy_wait_us, CPU_WORK: self.cpu_wait_us}
        rest = self.gpu_idle_us - sum(named.values())
        return {"gpu_busy": min(self.gpu_busy_us, self.span_us), **named, UNEXPLAINED: rest}

    # Verdict, cause and evidence are computed once and kept in the instance (a worker's totals travel
    # to the merge with them), always in one order: an instance dict that gains its keys in the same
    # order as its class's other instances stays a shared-key dict (~64 bytes more); in another order
    # it becomes a full dict (~1.5 KB: 7.6 MB for the 5,000 inferred steps of a many-streams trace).
    def _bottleneck(self) -> tuple[str, str | None]:
        got: tuple[str, str | None] | None = self.__dict__.get("_verdict_cause")
        if got is None:
            got = bottleneck(self)
            object.__setattr__(self, "_verdict_cause", got)
        return got

    @property
    def verdict(self) -> str:
        return self._bottleneck()[0]

    @property
    def cause(self) -> str | None:
        return self._bottleneck()[1]

    @property
    def evidence(self) -> str:
        got: str | None = self.__dict__.get("_evidence_text")
        if got is None:
            self._bottleneck()  # its key first, whichever is asked first
            got = evidence(self)
            object.__setattr__(self, "_evidence_text", got)
        return got

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _FIELD_NAMES}
        out["parts"] = self.parts()
        out.update(gpu_idle_us=self.gpu_idle_us, gpu_util=self.gpu_util,
                   kernels_per_step=self.kernels_per_step, verdict=self.verdict, cause=self.cause,
                   evidence=self.evidence)
        return out


def bottleneck(t: LaunchTotals) -> tuple[str, str | None]:
    """(verdict, cause) from additive totals.

    - ``cpu-only`` without GPU activity;
    - ``undetermined`` when the totals carry a reason the trace cannot support a verdict;
    - ``gpu-bound`` when the GPU's own time (``compute_us``) is ≥ GPU_BOUND_SHARE of the span and
      its own busy time (``own_busy_us``) ≥ BUSY_SHARE of it;
    - else the cause holding the most of the remaining time names the verdict when it holds
      ≥ DOMINANT_SHARE of it: ``launch`` → ``launch-bound``, ``communication`` →
      ``communication-bound``, ``unexplained`` → ``undetermined``, ``data_loading``/``sync``/
      ``copies``/``cpu_work`` → ``host-bound`` with that cause;
    - else ``mixed`` with the two largest causes joined by ``+``.
    """
    if t.undetermined:
        return UNDETERMINED, None
    if t.gpu_ops == 0:
        return CPU_ONLY, None
    if t.span_us <= 0 or (t.compute_us >= GPU_BOUND_SHARE * t.span_us and t.own_busy_us >= BUSY_SHARE * t.span_us):
        return GPU_BOUND, None
    ranked = sorted(t.causes().items(), key=lambda kv: -kv[1])
    rest = max(t.span_us - t.compute_us, 0.0)
    top, top_us = ranked[0]
    if top_us > 0 and top_us >= DOMINANT_SHARE * rest:
        return CAUSE_VERDICT.get(top, HOST_BOUND), top
    second = ranked[1][0] if ranked[1][1] > 0 else None
    return MIXED, f"{top}+{second}" if second else top


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole > 0 else "–"


def evidence(t: LaunchTotals) -> str:
    """One sentence that says why, with per-step numbers."""
    verdict, cause = bottleneck(t)
    if verdict == UNDETERMINED and t.undetermined:
        return f"The trace cannot support a verdict: {t.undetermined}."
    if verdict == CPU_ONLY:
        return "No GPU activity: only CPU work was recorded."
    n = max(t.steps, 1)
    span, busy = t.span_us / n, t.gpu_busy_us / n
    per = " per step" if t.steps > 1 else ""
    if verdict == GPU_BOUND:
        return (f"The GPU is busy {_pct(t.gpu_busy_us, t.span_us)} of the {fmt_us(span)} span{per} "
                f"({fmt_us(busy)}): the kernels set the pace.")
    causes = t.causes()
    if verdict == MIXED:
        names = (cause or "").split("+")
        parts = [f"{CAUSE_WORDS[c]} {fmt_us(causes[c] / n)}" for c in names if c in causes]
        return (f"The GPU computes only {_pct(t.compute_us, t.span_us)} of the {fmt_us(span)} span{per}, "
                f"and no single cause dominates the rest: " + "; ".join(parts) + ".")
    assert cause is not None
    share = _pct(causes[cause], t.span_us)
    if cause == LAUNCH:
        return (f"The GPU waits for kernel launches {share} of the {fmt_us(span)} span{per}: "
                f"{t.kernels / n:.0f} kernels{per}, {fmt_us(t.cpu_launch_us / n)} of CPU time in launch calls, "
                f"{fmt_us(busy)} of GPU work.")
    if cause == COMMUNICATION and t.p2p_exposed_us >= DOMINANT_SHARE * t.comm_exposed_us:
        return (f"Point-to-point transfers (SendRecv) wait on another rank with no compute beside them {share} "
                f"of the {fmt_us(span)} span{per} ({fmt_us(causes[cause] / n)}): pipeline bubbles.")
    if cause == COMMUNICATION:
        return (f"Collectives run with no compute beside them {share} of the {fmt_us(span)} span{per} "
                f"({fmt_us(causes[cause] / n)}): the GPU waits on other ranks (stragglers, or exposed communication).")
    if cause == UNEXPLAINED:
        return (f"The GPU idles {share} of the {fmt_us(span)} span{per} ({fmt_us(causes[cause] / n)}) with its next "
                f"kernel already launched and nothing recorded running (work outside the trace, another process "
                f"or rank, a cross-stream wait or a CPU/GPU clock offset): the trace cannot tell what bounds the step.")
    detail = {
        DATA_LOADING: "while the main thread loads the next batch in the DataLoader",
        SYNC: f"after host syncs drained its queue ({t.syncs / n:.0f} sync call{'' if round(t.syncs / n) == 1 else 's'}{per}, "
              f"{fmt_us(t.sync_us / n)} of CPU waiting)",
        COPIES: "in copies from pageable host memory or while the CPU is blocked in them",
        CPU_WORK: "while the CPU runs Python or CPU ops with no kernel launched",
    }[cause]
    return (f"The GPU waits {share} of the {fmt_us(span)} span{per} ({fmt_us(causes[cause] / n)}) "
            f"{detail}.")


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(LaunchTotals))
