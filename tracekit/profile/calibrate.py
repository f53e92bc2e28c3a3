"""`tracekit calibrate`: a null loop of tiny ops timed without and under torch.profiler on this machine.

The loop is OPS_PER_ITERATION `torch.add` calls on a 1-element tensor (on the GPU when there is one,
else on the CPU), run ITERATIONS times: once as it is (the fastest of BARE_REPEATS runs), once under
torch.profiler with `tracekit profile`'s settings (session.profiler_activities, RECORD_SHAPES). Both
runs are timed by `time.perf_counter_ns()` around the loop and one synchronisation at its end. The
profiled run's trace is read with tracekit's own loader, so the recorded CPU events (ops,
annotations), runtime calls and kernel launch calls are counted as the execution model counts them
(tracekit/model/); only those inside the loop's `record_function` window count.
"""

from __future__ import annotations

import datetime as _dt
import gc
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from tracekit.errors import ProfileError
from tracekit.profile import steps
from tracekit.profile.session import RECORD_SHAPES, profiler_activities, require_torch
from tracekit.trace import tables

DEFAULT_NAME = "tracekit-calibration.json"
DEFAULT_ITERATIONS = 2000
OPS_PER_ITERATION = 4
BARE_REPEATS = 3
WINDOW = "tracekit.calibrate"  # the record_function around the profiled loop
FAST_PERCENTILE = 10.0  # as the model's fast launch (model/projection.py FAST_LAUNCH_PERCENTILE)
LAUNCH_BOUND_SHARE = 0.9  # the GPU busy less than this share of the bare loop: the launches bound it


@dataclass(frozen=True)
class Calibration:
    """What `tracekit calibrate` measured (times in µs; None where this machine has nothing to measure)."""

    device: str
    cuda: bool
    torch: str
    date: str
    iterations: int
    ops_per_iteration: int
    bare_us_per_iteration: float
    profiled_us_per_iteration: float
    events_per_iteration: float  # recorded CPU events: ops and annotations
    runtime_calls_per_iteration: float  # runtime/driver calls (the kernel launches among them)
    kernels_per_iteration: float
    per_event_us: float  # (profiled - bare) / (events + runtime calls) per iteration
    launch_p10_us: float | None  # the profiled kernel launch calls' FAST_PERCENTILE-th percentile
    launch_median_us: float | None
    gpu_busy_us_per_iteration: float | None  # the loop's kernels' summed durations
    launch_bound: bool | None  # GPU busy < LAUNCH_BOUND_SHARE of the bare loop
    bare_launch_us: float | None  # the bare loop's time per kernel launched, when launch-bound
    # plain Python (python_loop: no torch call) timed under the profiler / bare: how much slower the
    # Python between recorded events runs while the profiler records (None: not measured)
    python_slowdown: float | None = None

    def to_dict(self) -> dict[str, Any]:
        from tracekit._version import __version__
        from tracekit.pipeline.calibration import SCHEMA

        return {"schema": SCHEMA, "tracekit": __version__, **asdict(self),
                "activities": ["cpu", "cuda"] if self.cuda else ["cpu"], "record_shapes": RECORD_SHAPES}


@dataclass(frozen=True)
class LoopCounts:
    """What the profiled loop recorded inside its WINDOW: CPU events (ops, annotations), runtime
    calls, kernels launched by its kernel launch calls, those calls' durations, the kernels' summed
    durations (µs)."""

    events: int
    runtime_calls: int
    kernels: int
    launch_us: tuple[float, ...]
    gpu_busy_us: float


PYTHON_WORDS = ("alpha", "betabeta", "gamma", "deltadelta", "omega", "kappakappa")
PYTHON_TEXTS = tuple(" ".join(PYTHON_WORDS[(i * 7 + j) % len(PYTHON_WORDS)] for j in range(4 + i % 9))
                     for i in range(2000))


def python_loop() -> int:
    """Plain Python with no torch call (a character-hash tokenizer over PYTHON_TEXTS): what a data
    pipeline or a training loop's host code does between ops."""
    total = 0
    for text in PYTHON_TEXTS:
        for word in text.split():
            h = 7
            for c in word:
                h = (h * 31 + ord(c)) % 50021
            total += h
    return total


def python_slowdown(torch: ModuleType, cuda: bool, repeats: int = BARE_REPEATS) -> float:
    """python_loop's fastest time under torch.profiler (tracekit profile's settings) / its fastest bare
    time, alternating `repeats` times."""
    from torch.profiler import profile

    def timed_once() -> int:
        start = time.perf_counter_ns()
        python_loop()
        return time.perf_counter_ns() - start

    python_loop()
    bare, profiled = [], []
    for _ in range(repeats):
        bare.append(timed_once())
        with profile(activities=profiler_activities(cuda), record_shapes=RECORD_SHAPES):
            profiled.append(timed_once())
    return min(profiled) / max(min(bare), 1)


def calibrate(iterations: int = DEFAULT_ITERATIONS, *, say: Callable[[str], None] = lambda m: None) -> Calibration:
    """Run the null loop bare and profiled in this process; what it measured."""
    if iterations < 1:
        raise ProfileError(f"iterations must be >= 1, not {iterations}")
    torch = require_torch()
    if steps.active() is not None:
        raise ProfileError("a tracekit profile is already running in this process")
    cuda = bool(torch.cuda.is_available())
    x = torch.ones(1, device="cuda" if cuda else "cpu")
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)

    def loop(n: int) -> None:
        y = x
        for _ in range(n):
            for _ in range(OPS_PER_ITERATION):
                y = torch.add(y, x)

    warm = max(1, min(200, iterations // 10))
    was_enabled = gc.isenabled()
    gc.disable()  # no collection inside a timed loop
    try:
        loop(warm)
        sync()
        say(f"{iterations} iterations of {OPS_PER_ITERATION} x torch.add without the profiler")
        bare_ns = min(_timed(loop, sync, iterations) for _ in range(BARE_REPEATS))
        say("the same under torch.profiler")
        profiled_ns, counts = _profiled(torch, loop, sync, iterations, warm, cuda)
        say("plain Python with and without the profiler")
        slowdown = python_slowdown(torch, cuda)
    finally:
        if was_enabled:
            gc.enable()
    device = torch.cuda.get_device_name() if cuda else f"CPU ({platform.machine() or 'unknown'})"
    return summarise(counts, iterations=iterations, bare_ns=bare_ns, profiled_ns=profiled_ns, cuda=cuda,
                     device=device, torch_version=str(torch.__version__), python_slowdown=slowdown)


def summarise(counts: LoopCounts, *, iterations: int, bare_ns: int, profiled_ns: int, cuda: bool, device: str,
              torch_version: str, date: str | None = None, python_slowdown: float | None = None) -> Calibration:
    """The Calibration of `iterations` loop iterations timed `bare_ns` bare and `profiled_ns` profiled,
    the profiled run having recorded `counts` (ProfileError when the numbers cannot calibrate)."""
    bare_us, profiled_us = bare_ns / 1000 / iterations, profiled_ns / 1000 / iterations
    per_iteration = (counts.events + counts.runtime_calls) / iterations
    if per_iteration <= 0:
        raise ProfileError("the profiled loop recorded no CPU events (torch.profiler recorded nothing)")
    if profiled_us <= bare_us:
        raise ProfileError(f"the profiled loop ({profiled_us:.2f} µs per iteration) was not slower than the "
                           f"unprofiled one ({bare_us:.2f} µs): the machine is too busy to calibrate; run again")
    launches = np.asarray(counts.launch_us, dtype=float)
    kernels = counts.kernels / iterations
    busy = counts.gpu_busy_us / iterations if cuda and counts.kernels else None
    bound = None if busy is None else busy < LAUNCH_BOUND_SHARE * bare_us
    return Calibration(
        device=device,
        cuda=cuda,
        torch=torch_version,
        date=date or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        iterations=iterations,
        ops_per_iteration=OPS_PER_ITERATION,
        bare_us_per_iteration=bare_us,
        profiled_us_per_iteration=profiled_us,
        events_per_iteration=counts.events / iterations,
        runtime_calls_per_iteration=counts.runtime_calls / iterations,
        kernels_per_iteration=kernels,
        per_event_us=(profiled_us - bare_us) / per_iteration,
        launch_p10_us=float(np.percentile(launches, FAST_PERCENTILE)) if len(launches) else None,
        launch_median_us=float(np.median(launches)) if len(launches) else None,
        gpu_busy_us_per_iteration=busy,
        launch_bound=bound,
        bare_launch_us=bare_us / kernels if bound and kernels > 0 else None,
        python_slowdown=python_slowdown,
    )


def _timed(loop: Callable[[int], None], sync: Callable[[], None], n: int) -> int:
    start = time.perf_counter_ns()
    loop(n)
    sync()
    return time.perf_counter_ns() - start


def _profiled(torch: ModuleType, loop: Callable[[int], None], sync: Callable[[], None], n: int, warm: int,
              cuda: bool) -> tuple[int, LoopCounts]:
    """The loop under torch.profiler (after `warm` iterations under it, outside the window): its
    time and the counts read from its exported trace."""
    from torch.profiler import profile, record_function

    try:
        with profile(activities=profiler_activities(cuda), record_shapes=RECORD_SHAPES) as prof:
            loop(warm)
            sync()
            start = time.perf_counter_ns()
            with record_function(WINDOW):
                loop(n)
            sync()
            elapsed = time.perf_counter_ns() - start
    except Exception as exc:
        raise ProfileError(f"torch.profiler could not record the calibration loop: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="tracekit-calibrate-") as tmp:
        path = Path(tmp) / "calibration.trace.json"
        try:
            prof.export_chrome_trace(str(path))
        except Exception as exc:
            raise ProfileError(f"torch.profiler could not export the calibration trace: {exc}") from None
        return elapsed, count_window(path)


def count_window(path: Path) -> LoopCounts:
    """Recorded CPU events, runtime calls, kernels (and their launch calls' durations, their summed
    GPU time) inside the WINDOW annotation of the trace at `path`."""
    from tracekit.errors import TraceFormatError
    from tracekit.trace.load import load_file

    try:
        rank = load_file(path)
    except TraceFormatError as exc:
        raise ProfileError(f"the calibration trace could not be read: {exc}") from None
    notes = rank.annotations
    cpu_notes = notes[~notes[tables.AN_GPU].astype(bool)] if tables.AN_GPU in notes else notes
    window = cpu_notes[cpu_notes[tables.AN_NAME] == WINDOW]
    if not len(window):
        raise ProfileError(f"the calibration trace has no {WINDOW} annotation")
    lo, hi = float(window[tables.AN_TS].iat[0]), float(window[tables.AN_END].iat[0])

    def inside(ts: pd.Series) -> np.ndarray:
        values = ts.to_numpy(dtype=float)
        return (values >= lo) & (values < hi)

    ops = int(inside(rank.ops[tables.OP_TS]).sum())
    others = int((inside(cpu_notes[tables.AN_TS]) & (cpu_notes[tables.AN_NAME] != WINDOW).to_numpy()).sum())
    runtime = rank.runtime[inside(rank.runtime[tables.RT_TS])]
    launch_rows = runtime[runtime[tables.RT_KIND] == tables.KIND_KERNEL]
    gpu = rank.gpu
    kernels = gpu[(gpu[tables.GPU_KIND] == tables.KIND_KERNEL) & gpu[tables.GPU_LAUNCH].isin(launch_rows.index)]
    return LoopCounts(events=ops + others, runtime_calls=len(runtime), kernels=len(kernels),
                   launch_us=tuple(float(v) for v in launch_rows[tables.RT_DUR]),
                   gpu_busy_us=float(kernels[tables.GPU_DUR].sum()))


def render_text(c: Calibration, written: Path | None = None) -> str:
    """The human summary of a calibration."""
    device = "GPU" if c.cuda else "CPU"
    lines = [
        f"tracekit calibrate: {c.device}, torch {c.torch}; {c.iterations} iterations of "
        f"{c.ops_per_iteration} x torch.add on a 1-element {device} tensor",
        f"  without the profiler: {c.bare_us_per_iteration:.2f} µs per iteration",
        f"  under the profiler:   {c.profiled_us_per_iteration:.2f} µs per iteration, recording "
        f"{c.events_per_iteration:.2f} CPU events and {c.runtime_calls_per_iteration:.2f} runtime calls",
        f"  cost per recorded event or call: {c.per_event_us:.3f} µs",
    ]
    if c.launch_p10_us is not None and c.launch_median_us is not None:
        lines.append(f"  profiled kernel launch calls: {c.launch_p10_us:.2f} µs (10th percentile), "
                     f"{c.launch_median_us:.2f} µs (median)")
    if c.bare_launch_us is not None:
        lines.append(f"  unprofiled loop per kernel launched: {c.bare_launch_us:.2f} µs (launch-bound: the GPU "
                     f"was busy {c.gpu_busy_us_per_iteration or 0:.2f} µs per iteration)")
    elif c.cuda:
        lines.append("  unprofiled launch cost: not measured (the loop was not launch-bound)")
    else:
        lines.append("  no GPU: no kernel launch calls to measure")
    if c.python_slowdown is not None:
        lines.append(f"  plain Python under the profiler: {c.python_slowdown:.2f}x its time without it")
    if written is not None:
        lines.append(f"calibration written to {written}")
    return "\n".join(lines)
