"""Steady state: which steps are set-up, warm-up, partial or outliers, from evidence in the trace."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracekit.analyzers import names
from tracekit.analyzers.windows import StepWindows
from tracekit.trace import tables
from tracekit.trace.intervals import busy_time_us
from tracekit.trace.model import RankTrace
from tracekit.units import fmt_bytes, fmt_us, plural

STEADY = "steady"
SETUP = "setup"  # holds one-time work (compilation, JIT, handle creation, uploads, allocations)
WARMUP = "warmup"  # a leading step far slower than the median, with no one-time work recorded
PARTIAL = "partial"  # the last step cut short (the tail after the last step mark)
OUTLIER = "outlier"  # a later step whose span is far from the median (a GC pause, a checkpoint)
PHASES = (STEADY, SETUP, WARMUP, PARTIAL, OUTLIER)

# Robust outlier rule (Iglewicz & Hoaglin's modified z-score): z = 0.6745 (x − median) / MAD.
MAD_Z = 3.5  # |z| above this is far from the median ...
MIN_REL_DEVIATION = 0.25  # ... and only if also at least 25 % away from it (jitter is not an outlier)
MAD_FLOOR = 0.02  # MAD is at least 2 % of the median (identical steps would make any change infinite)
PARTIAL_SHARE = 0.5  # the last step with under half the median kernels (or span) is a partial tail
UPLOAD_MIN_BYTES = 16 * 2**20  # host-to-device bytes in a step that count as an upload ...
UPLOAD_RATIO = 4.0  # ... when also this many times the median step's host-to-device bytes
ALLOC_MIN_CALLS = 8  # device allocations in one step that count as set-up work
EVIDENCE_SHARE = 0.05  # one-time work must fill this share of a slow step to name it set-up
# A step whose one-time work changes the code the next steps run (compilation, graph capture), and
# after which the steps launch this many times more (or fewer) calls, ends an earlier regime: the
# steps before it are warm-up and the last regime is the steady state (eager, then CUDA graphs).
CODE_CHANGES = frozenset({"torch.compile", "autotuning", "Triton JIT", "CUDA graph capture"})
REGIME_RATIO = 1.5
MIN_REGIME_STEPS = 3  # steps the last regime needs before the earlier ones are left out

# Names of CPU ops and annotations that only run while code is compiled or tuned.
ONE_TIME_OPS: tuple[tuple[str, str], ...] = (
    (r"\(dynamo_timed\)|compile_inner|_compile\b|compile_fx|call_user_compiler|aot_dispatch|"
     r"create_aot_dispatcher|GraphLowering|fx_codegen|async_compile|PyCodeCache", "torch.compile"),
    (r"autotun|benchmark_all_configs|CachingAutotuner|select_algorithm", "autotuning"),
    (r"^triton\.compile|TritonCompile|jit_compile|\bcompile_module\b", "Triton JIT"),
)
# Runtime/driver API calls that set a process up.
ONE_TIME_APIS: tuple[tuple[str, str], ...] = (
    (r"^(?:cu|hip)(?:Module|Library)Load|^cuModuleGetFunction$|^cudaGetFuncBySymbol", "kernel loading"),
    (r"^(?:cuda|hip)Malloc(?:Async|Managed|Pitch|3D)?(?:_v\d+)?$|^cuMemAlloc", "device allocations"),
    (r"^(?:cuda|hip)(?:HostAlloc|MallocHost|HostRegister)|^cuMemHostAlloc", "pinned host allocations"),
    (r"^(?:cuda|hip)StreamCreate|^cuStreamCreate|^(?:cudnn|cublas|cublasLt|miopen|rocblas)Create",
     "stream and library handle creation"),
    (r"^(?:cuda|hip|cu)StreamBeginCapture|^(?:cuda|hip|cu)GraphInstantiate", "CUDA graph capture"),
)
_ONE_TIME_OPS = tuple((re.compile(p), label) for p, label in ONE_TIME_OPS)
_ONE_TIME_APIS = tuple((re.compile(p), label) for p, label in ONE_TIME_APIS)
H2D = re.compile(r"HtoD|Host\s*->\s*Device|Pageable\s*->\s*Device|Pinned\s*->\s*Device")


@dataclass(frozen=True)
class StepPhase:
    """What one step is: its phase, why (plain words), its span, and the one-time work it holds."""

    step: int
    phase: str
    reason: str
    span_us: float
    one_time: tuple[tuple[str, str], ...] = ()  # (what, how much) e.g. ("torch.compile", "2.6 s")

    @property
    def steady(self) -> bool:
        return self.phase == STEADY

    def to_dict(self) -> dict[str, object]:
        return {"step": self.step, "phase": self.phase, "reason": self.reason, "span_us": self.span_us,
                "one_time": [{"what": w, "amount": a} for w, a in self.one_time]}


def robust_z(values: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Modified z-scores of `values` against the median and MAD of `reference` (default: values)."""
    ref = values if reference is None else reference
    if not len(ref):
        return np.zeros(len(values))
    med = float(np.median(ref))
    mad = max(float(np.median(np.abs(ref - med))), MAD_FLOOR * abs(med), 1e-9)
    return 0.6745 * (values - med) / mad


def _far(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Which values are far from the reference's median (MAD rule and MIN_REL_DEVIATION)."""
    med = float(np.median(reference))
    z = robust_z(values, reference)
    return (np.abs(z) > MAD_Z) & (np.abs(values - med) > MIN_REL_DEVIATION * abs(med))


def one_time_work(rank: RankTrace, windows: StepWindows) -> list[dict[str, float]]:
    """Per step position: µs of compilation/JIT (ops and annotations), µs and calls of set-up APIs,
    and host-to-device bytes, keyed by label ('... bytes', '... calls' for the non-time ones)."""
    n = len(windows)
    out: list[dict[str, float]] = [{} for _ in range(n)]
    for table, pos in ((rank.ops, windows.op_pos), (rank.annotations, windows.an_pos)):
        if not len(table):
            continue
        labels = names.labels(table[tables.OP_NAME].to_numpy(dtype=object), _ONE_TIME_OPS)
        hit = (labels != "") & (pos >= 0)
        for label in set(labels[hit].tolist()):
            sel = hit & (labels == label)
            ts, end = table[tables.OP_TS].to_numpy(dtype=float)[sel], table[tables.OP_END].to_numpy(dtype=float)[sel]
            for p in np.unique(pos[sel]).tolist():
                mine = pos[sel] == p
                out[p][label] = out[p].get(label, 0.0) + busy_time_us(ts[mine], end[mine])
    rt = rank.runtime
    if len(rt):
        labels = names.labels(rt[tables.RT_NAME].to_numpy(dtype=object), _ONE_TIME_APIS)
        dur = rt[tables.RT_DUR].to_numpy(dtype=float)
        hit = (labels != "") & (windows.rt_pos >= 0)
        for i in np.flatnonzero(hit).tolist():
            d = out[windows.rt_pos[i]]
            d[labels[i]] = d.get(labels[i], 0.0) + dur[i]
            d[labels[i] + " calls"] = d.get(labels[i] + " calls", 0.0) + 1
    gpu = rank.gpu
    if len(gpu):
        is_h2d = (gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_MEMCPY) & names.matches(gpu[tables.GPU_NAME], H2D)
        nbytes = np.clip(gpu[tables.GPU_BYTES].to_numpy(dtype=float), 0, None)
        sel = is_h2d & (windows.gpu_pos >= 0)
        per = np.bincount(windows.gpu_pos[sel], weights=nbytes[sel], minlength=n)
        for p in range(n):
            if per[p] > 0:
                out[p]["upload bytes"] = float(per[p])
    return out


def _evidence(work: dict[str, float], median_upload: float) -> tuple[list[tuple[str, str]], float]:
    """(what, amount) items of one-time work in a step, and the µs they account for."""
    items, time_us = [], 0.0
    for label, value in sorted(work.items(), key=lambda kv: -kv[1]):
        if label.endswith(" calls") or label == "upload bytes":
            continue
        calls = work.get(label + " calls")
        if label == "device allocations" and (calls or 0) < ALLOC_MIN_CALLS:
            continue
        items.append((label, fmt_us(value) + (f" in {plural(calls, 'call')}" if calls else "")))
        time_us += value
    upload = work.get("upload bytes", 0.0)
    if upload >= UPLOAD_MIN_BYTES and upload >= UPLOAD_RATIO * median_upload:
        items.append(("host-to-device upload", fmt_bytes(upload)))
    return items, time_us


def classify_steps(rank: RankTrace, windows: StepWindows, spans: np.ndarray, kernels: np.ndarray,
                   launches: np.ndarray | None = None) -> tuple[StepPhase, ...]:
    """The phase of every step (see the module constants for the rule):

    - the last step is PARTIAL when it launched under PARTIAL_SHARE of the median kernels of the
      others (without kernels: spans under PARTIAL_SHARE of their median span): the tail after the
      last mark;
    - a step whose span is far above the median (|modified z| > MAD_Z and > MIN_REL_DEVIATION away)
      is SETUP when one-time work (ONE_TIME_OPS/ONE_TIME_APIS, an upload of UPLOAD_MIN_BYTES and
      UPLOAD_RATIO × the median step's) fills EVIDENCE_SHARE of it or it carries an upload, else
      WARMUP when no steady step came before it, else OUTLIER; a step far below the median is an
      OUTLIER too. With under 3 steps to compare, "far above" is 1.5× the median and only SETUP
      applies;
    - regimes: after a step whose one-time work changes the code (CODE_CHANGES: compilation, CUDA
      graph capture) the steps may launch REGIME_RATIO× more or fewer calls than before it; then
      that step is SETUP, the steps before it are WARMUP (an earlier regime), and the rule above
      runs again on the MIN_REGIME_STEPS or more steps after it;
    - everything else is STEADY. If no step would be steady, every step is.
    """
    n = len(spans)
    if windows.scope not in ("steps", "inferred") or n == 0:
        return tuple(StepPhase(int(s), STEADY, "the whole trace", float(sp))
                     for s, sp in zip(windows.numbers.tolist(), spans.tolist(), strict=True))
    work = one_time_work(rank, windows)
    uploads = np.array([w.get("upload bytes", 0.0) for w in work])
    phases: list[str] = [STEADY] * n
    reasons: list[str] = [""] * n
    body = np.arange(n)
    if n >= 2 and windows.scope == "steps":  # inferred repeats are whole iterations by construction
        k_median = float(np.median(kernels[:-1]))
        # by kernels when the steps launch any (a step's span also holds GPU work queued before it)
        short = kernels[-1] < PARTIAL_SHARE * k_median if k_median > 0 else \
            spans[-1] < PARTIAL_SHARE * np.median(spans[:-1])
        if short:
            phases[-1] = PARTIAL
            reasons[-1] = (f"the tail after the last step mark: it launched {plural(kernels[-1], 'kernel')}, "
                           f"a median step {k_median:.0f}")
            body = np.arange(n - 1)
    median_upload = float(np.median(uploads[body])) if len(body) else 0.0
    found = [_evidence(w, median_upload) for w in work]
    evidence = [tuple(items) for items, _ in found]
    _phases_by_span(body, spans, found, phases, reasons)
    change = _regime_change(body, spans, launches, found) if launches is not None else None
    if change is not None:
        at, (was, now, what) = change
        step = int(windows.numbers[at])
        for i in body[body < at].tolist():
            if phases[i] != SETUP:
                phases[i] = WARMUP
                reasons[i] = (f"an earlier regime: {was:.0f} launches per step before step {step} ({what}), "
                              f"{now:.0f} after it; the steps after the last change are the steady state")
        phases[at] = SETUP
        reasons[at] = "one-time work: " + ", ".join(f"{w} {a}" for w, a in found[at][0])
        after = body[body > at]
        for i in after.tolist():
            phases[i], reasons[i] = STEADY, ""
        _phases_by_span(after, spans, found, phases, reasons)
    if STEADY not in phases:
        phases = [STEADY] * n
        reasons = ["every step differs from the others: all are kept"] * n
    return tuple(StepPhase(int(s), p, r, float(sp), e) for s, p, r, sp, e in
                 zip(windows.numbers.tolist(), phases, reasons, spans.tolist(), evidence, strict=True))


def _phases_by_span(body: np.ndarray, spans: np.ndarray, found: list[tuple[list[tuple[str, str]], float]],
                    phases: list[str], reasons: list[str]) -> None:
    """SETUP, WARMUP or OUTLIER for the steps of `body` far from their median span (in place)."""
    ref = spans[body]
    med = float(np.median(ref)) if len(ref) else 0.0
    span_rule = len(ref) >= 3  # with fewer steps there is no robust median: only set-up work is left out
    n = len(spans)
    far = _far(spans, ref) if span_rule else (spans > 1.5 * med) if len(ref) == 2 else np.zeros(n, bool)
    seen_steady = False
    for i in body.tolist():
        items, time_us = found[i]
        slow = bool(far[i]) and spans[i] > med
        has_upload = any(w == "host-to-device upload" for w, _ in items)
        if slow and items and (time_us >= EVIDENCE_SHARE * spans[i] or has_upload):
            phases[i] = SETUP
            reasons[i] = "one-time work: " + ", ".join(f"{w} {a}" for w, a in items)
        elif not span_rule:
            seen_steady = True
        elif slow and not seen_steady:
            phases[i] = WARMUP
            reasons[i] = f"warm-up: {spans[i] / med:.1f}× the median step ({fmt_us(med)})"
        elif far[i]:
            phases[i] = OUTLIER
            reasons[i] = f"{spans[i] / med:.1f}× the median step ({fmt_us(med)})"
        else:
            seen_steady = True


def _regime_change(body: np.ndarray, spans: np.ndarray, launches: np.ndarray,
                   found: list[tuple[list[tuple[str, str]], float]]) -> tuple[int, tuple[float, float, str]] | None:
    """(position of the last step that changes the code and the launches per step, (median launches
    before it, after it, what changed)) or None. The step needs CODE_CHANGES work filling
    EVIDENCE_SHARE of it, a step before it and MIN_REGIME_STEPS after it; the medians are compared
    with one launch added to each (a step of graph replays may launch one call)."""
    for at in body[::-1].tolist():
        items, time_us = found[at]
        changes = [w for w, _ in items if w in CODE_CHANGES]
        if not changes or time_us < EVIDENCE_SHARE * spans[at]:
            continue
        before, after = body[body < at], body[body > at]
        if len(before) == 0 or len(after) < MIN_REGIME_STEPS:
            continue
        was, now = float(np.median(launches[before])), float(np.median(launches[after]))
        if max(was + 1, now + 1) / min(was + 1, now + 1) >= REGIME_RATIO:
            return at, (was, now, " and ".join(changes))
    return None


def excluded_lines(steps: Sequence[tuple[int, StepPhase]], *, multi: bool = False) -> list[str]:
    """One line per left-out step, consecutive steps of one rank with the same phase and reason on
    one line ('steps 1–15 (warmup, 6.01–7.45 ms each): an earlier regime: …'). `steps`: (rank, phase)
    pairs in rank and step order (Analysis.excluded, AnalysisSummary.excluded)."""
    groups: list[list[tuple[int, StepPhase]]] = []
    for rank, phase in steps:
        last = groups[-1][-1] if groups else None
        if (last is not None and last[0] == rank and last[1].phase == phase.phase
                and last[1].reason == phase.reason and phase.step == last[1].step + 1):
            groups[-1].append((rank, phase))
        else:
            groups.append([(rank, phase)])
    lines = []
    for g in groups:
        first, last_phase = g[0][1], g[-1][1]
        head = f"rank {g[0][0]} " if multi else ""
        lo, hi = min(p.span_us for _, p in g), max(p.span_us for _, p in g)
        if len(g) == 1:
            what = f"step {first.step} ({first.phase}, {fmt_us(lo)})"
        else:
            what = f"steps {first.step}–{last_phase.step} ({first.phase}, {fmt_us(lo)}–{fmt_us(hi)} each)"
        lines.append(f"{head}{what}: {first.reason}")
    return lines
