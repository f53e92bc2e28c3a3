"""`tracekit profile`'s unprofiled run: the target timed once in a child process, stored in the trace as "bare"."""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.profile.runner import Target
from tracekit.profile.tryrun import run_child, step_bounds
from tracekit.terminal import visible
from tracekit.trace.bare import BARE_KEY, MAX_STEP_US

KEY = BARE_KEY
METHOD = "CUDA events at step boundaries, no synchronisation (tracekit.profile.timed)"
_LAST_LINE = 200  # characters of the child's last output line shown when it could not start


def launcher_world_size(environ: Mapping[str, str] | None = None) -> int:
    """WORLD_SIZE of a multi-process launcher (torchrun sets it), 1 when unset or not a number."""
    env = os.environ if environ is None else environ
    value = env.get("WORLD_SIZE", "").strip()
    return int(value) if value.isdigit() and int(value) > 1 else 1


def time_steps(target: Target, *, timeout: float | None = None) -> dict[str, Any] | str:
    """Run `target` once without the profiler (`python -m tracekit.profile.trychild --mode time`,
    as `--try` does; stdin closed, output kept out of the terminal); its timed result, or one line
    saying why there is none (it timed out, could not start, or the script exited with a status)."""
    with tempfile.TemporaryDirectory(prefix="tracekit-bare-") as tmp:
        folder = Path(tmp)
        log_path = folder / "run.log"
        with open(log_path, "w", encoding="utf-8") as log:
            result = run_child(target, "time", None, folder / "unused.trace.json.gz", folder / "result.json",
                               log, 0, None, timeout, stdin=subprocess.DEVNULL)
        if result.get("error"):
            why = str(result["error"]).removesuffix(" (see the log)")
            last = _last_line(log_path)
            return f"{why} (its last line: {last})" if last and "timed out" not in why else why
    status = result.get("status")
    if status:
        return f"the script exited with status {status}"
    return result


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line and not line.startswith("$ ")]
    return visible(lines[-1][:_LAST_LINE]) if lines else ""


def bare_object(timing: dict[str, Any], recorded: Sequence[int]) -> dict[str, Any] | None:
    """The trace's "bare" object: the timed run's duration of each step the profiled trace holds
    (`recorded`, its ProfilerStep numbers; step k of the timed run is ProfilerStep#k, warm-up steps
    counted, as `--try` maps them), on the gpu clock when the run has CUDA events, else the wall
    clock. None when no recorded step was timed (no steps marked, or the runs differ)."""
    clock, bounds = step_bounds(timing)
    step_us: dict[str, float] = {}
    for k in recorded:
        if 0 <= k < len(bounds) - 1:
            us = _number(bounds[k + 1]) - _number(bounds[k])
            if math.isfinite(us) and 0 <= us <= MAX_STEP_US:
                step_us[str(k)] = round(us, 3)
    if not step_us:
        return None
    marked = timing.get("steps_marked")
    return {
        "clock": clock,
        "step_us": step_us,
        "steps_marked": marked if isinstance(marked, int) and not isinstance(marked, bool) else 0,
        "step_source": str(timing.get("step_source") or ""),
        "runs": 1,
        "method": METHOD,
    }


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
