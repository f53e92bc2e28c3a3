"""`tracekit profile --try KNOB,...`: run the script as a baseline and once per knob, each in fresh processes.

Every run (the baseline, then each knob) is two child processes (`tracekit.profile.trychild`): one
under the profiler, writing BASE.trace.json.gz / BASE.try-KNOB.trace.json.gz, and one timed without
the profiler (the same step marks, `timed.TimedSession`). The steady steps of the profiled run (the
analysis's steady steps) pick which steps of the timed run are averaged, so both columns describe the
same steps. The predicted saving is the baseline's suggestion that the knob answers (the rule rows
whose `knobs` name it, `tracekit.suggestions.rules.knob_rules`; the largest per-step saving among
those that fired).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tracekit.profile.runner import Target
from tracekit.trace.files import PROFILE_SUFFIX

if TYPE_CHECKING:
    from tracekit.pipeline.types import Analysis, Suggestion

SCHEMA = "tracekit.try/1"
OK, FAILED, SKIPPED, NOT_APPLIED = "ok", "failed", "skipped", "not applied"


@dataclass(frozen=True)
class TryRow:
    """One line of the --try table (times in µs per steady step; None where not measured)."""

    knob: str  # "baseline" for the unchanged run
    answers: str | None  # the suggestion id it answers (the fired one when one fired)
    predicted_us_per_step: float | None  # that suggestion's per-step saving on the baseline
    realised_us_per_step: float | None  # baseline - this run, profiled (what the prediction is about)
    profiled_us_per_step: float | None  # mean span of the profiled run's steady steps
    profiled_speedup: float | None  # baseline / this, profiled
    unprofiled_us_per_step: float | None  # the same steps, timed without the profiler
    unprofiled_speedup: float | None
    clock: str | None  # 'gpu' (CUDA events) or 'wall' for the unprofiled column
    steps: int  # steady steps averaged
    status: str  # OK, FAILED, SKIPPED (cannot apply here), NOT_APPLIED (nothing to change)
    reason: str  # why it failed / was skipped; what the knob changed when it ran
    trace: str | None
    diff_command: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


@dataclass(frozen=True)
class TryResult:
    """The whole --try table; `to_dict()` is the BASE.try.json document (schema tracekit.try/1)."""

    target: str
    rows: tuple[TryRow, ...]

    @property
    def baseline_ok(self) -> bool:
        return bool(self.rows) and self.rows[0].status == OK

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "target": self.target, "rows": [r.to_dict() for r in self.rows]}


def output_paths(base_trace: Path, knobs: list[str]) -> dict[str | None, Path]:
    """Trace path per run: BASE.trace.json.gz for the baseline (None), BASE.try-KNOB.trace.json.gz."""
    name = base_trace.name
    stem = name[: -len(PROFILE_SUFFIX)] if name.endswith(PROFILE_SUFFIX) else base_trace.stem
    out: dict[str | None, Path] = {None: base_trace}
    for k in knobs:
        out[k] = base_trace.with_name(f"{stem}.try-{k}{PROFILE_SUFFIX}")
    return out


def run_child(target: Target, mode: str, knob: str | None, trace: Path, result: Path, log: TextIO,
              warmup: int, active: int | None, timeout: float | None, *,
              stdin: int | None = None) -> dict[str, Any]:
    """One `tracekit.profile.trychild` process (its output to `log`, `stdin` as subprocess takes it);
    its result JSON, or {"status": ..., "error": why} when it timed out or ended before writing one."""
    cmd = [sys.executable, "-m", "tracekit.profile.trychild", "--mode", mode, "--result", str(result),
           "--trace", str(trace), "--warmup", str(warmup)]
    cmd += ["--knob", knob] if knob else []
    cmd += ["--active", str(active)] if active else []
    cmd += ["--module", target.module] if target.module else ["--script", str(target.script)]
    cmd += ["--", *target.args]
    result.unlink(missing_ok=True)
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    try:
        proc = subprocess.run(cmd, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"status": None, "error": f"timed out after {timeout:g} s"}
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"status": proc.returncode, "error": f"the run ended with status {proc.returncode} "
                                                    "before it started the script (see the log)"}
    finally:
        result.unlink(missing_ok=True)
    return data


def steady_steps(analysis: Analysis) -> tuple[list[int], float | None]:
    """(steady step numbers, mean steady-step span in µs) of a profiled run's analysis (first rank)."""
    if not analysis.ranks:
        return [], None
    lo = analysis.ranks[0].launch
    span = lo.totals.span_us / lo.totals.steps if lo.totals.steps else None
    return [int(s) for s in lo.steady_steps], span


def step_bounds(timing: dict[str, Any]) -> tuple[str, list[float]]:
    """(clock, boundaries) of a timed run's result: the CUDA events' ('gpu') when there are at least
    two, else the wall clock's. Boundary k is where step k (= ProfilerStep#k of a profiled run of the
    same script, warm-up steps included) starts; the last one is the end of the last step."""
    gpu, wall = timing.get("gpu_us") or [], timing.get("wall_us") or []
    return ("gpu", list(gpu)) if len(gpu) >= 2 else ("wall", list(wall))


def _timed_mean(timing: dict[str, Any], steady: list[int]) -> tuple[float | None, str | None]:
    clock, bounds = step_bounds(timing)
    if len(bounds) < 2:
        return None, None
    n = len(bounds) - 1
    chosen = [s for s in steady if 0 <= s < n] if steady and steady[0] >= 0 else []
    if not chosen:  # no steps marked, or none in common: the whole run without its first and last step
        chosen = list(range(1, n - 1)) if n >= 3 else list(range(n))
    return sum(bounds[s + 1] - bounds[s] for s in chosen) / len(chosen), clock


def _analyse(trace: Path, with_suggestions: bool) -> tuple[Analysis, list[Suggestion]]:
    from tracekit.pipeline.local import analyse_file

    result = analyse_file(trace, with_suggestions=with_suggestions)
    return result.analysis, list(result.suggestions)


def _prediction(knob: str, suggestions: Sequence[Suggestion]) -> tuple[str | None, float | None]:
    """(the suggestion id the knob answers, its predicted per-step saving): the fired suggestion of
    the knob's rules with the largest per-step saving, else the knob's first rule and None."""
    from tracekit.pipeline.types import knob_rules

    answers = [rule.id for rule in knob_rules(knob)]
    fired = [(s.id, s.per_step_us) for s in suggestions if s.id in answers and s.per_step_us is not None]
    if not fired:
        return (answers[0] if answers else None), None
    best_id, best_us = max(fired, key=lambda pair: pair[1])
    return best_id, float(best_us)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def try_knobs(target: Target, knobs: list[str], base_trace: Path, *, warmup: int = 0,
              active: int | None = None, timeout: float | None = None,
              say: Callable[[str], None] = lambda m: None,
              on_row: Callable[[TryResult], None] = lambda r: None) -> TryResult:
    """Run the baseline and each knob (profiled, then timed); analyse the traces; build the table.

    `on_row` gets the table so far after each run (to save partial results of a long --try)."""
    paths = output_paths(base_trace, knobs)
    rows: list[TryRow] = []
    base: dict[str, float | None] = {}
    suggestions: list[Suggestion] = []
    for knob, trace in paths.items():
        label = knob or "baseline"
        log_path = trace.with_name(trace.name[: -len(PROFILE_SUFFIX)] + ".log") \
            if trace.name.endswith(PROFILE_SUFFIX) else trace.with_suffix(".log")
        result_path = trace.with_name(trace.name + f".{os.getpid()}.result.json")
        runs: dict[str, dict[str, Any]] = {}
        trace.unlink(missing_ok=True)  # never read an older run's trace as this one's
        with open(log_path, "w", encoding="utf-8") as log:
            for mode in ("profile", "time"):
                say(f"{label}: {'profiled' if mode == 'profile' else 'timed'} run")
                runs[mode] = run_child(target, mode, knob, trace, result_path, log, warmup, active, timeout)
                if runs[mode].get("applied") is False:
                    break  # the knob cannot apply here: one run said so
        analysed: tuple[Analysis, list[Suggestion]] | str | None = None
        if trace.exists():
            try:
                analysed = _analyse(trace, knob is None)
            except Exception as exc:  # an unreadable trace is a failed run, said in the table
                analysed = f"{trace.name}: {exc}"
        if knob is None and isinstance(analysed, tuple):
            suggestions = analysed[1]
        row = _row(label, knob, trace, runs, suggestions, base, base_trace, log_path, analysed)
        if knob is None and row.status == OK:
            base.update(profiled=row.profiled_us_per_step, unprofiled=row.unprofiled_us_per_step)
        rows.append(row)
        on_row(TryResult(target.display, tuple(rows)))
    return TryResult(target.display, tuple(rows))


def _row(label: str, knob: str | None, trace: Path, runs: dict[str, dict[str, Any]],
         suggestions: list[Suggestion], base: dict[str, float | None], base_trace: Path,
         log_path: Path, analysed: tuple[Analysis, list[Suggestion]] | str | None) -> TryRow:
    answers, predicted = _prediction(knob, suggestions) if knob else (None, None)
    prof, timed = runs.get("profile", {}), runs.get("time", {})
    empty = TryRow(label, answers, predicted, None, None, None, None, None, None, 0, OK, "", None, None)
    if prof.get("applied") is False:
        return replace(empty, status=SKIPPED, reason=str(prof.get("reason", "")))
    errors = [f"{m}: {r['error']}" for m, r in (("profiled", prof), ("timed", timed)) if r.get("error")]
    errors += [f"{m}: the script exited with status {r['status']}" for m, r in
               (("profiled", prof), ("timed", timed)) if not r.get("error") and r.get("status")]
    if errors or analysed is None:
        why = "; ".join(errors) or "no trace was written"
        return replace(empty, status=FAILED, reason=f"{why} (log: {log_path.name})")
    if isinstance(analysed, str):
        return replace(empty, status=FAILED, reason=analysed)
    analysis = analysed[0]
    steady, span = steady_steps(analysis)
    timed_mean, clock = _timed_mean(timed, steady)
    applied = prof.get("applied", True) and timed.get("applied", True)
    notes = "; ".join(dict.fromkeys(prof.get("notes", []) + timed.get("notes", [])))
    diff = None if knob is None else f"tracekit diff {shlex.quote(str(base_trace))} {shlex.quote(str(trace))}"
    base_prof, base_timed = (span, timed_mean) if knob is None else (base.get("profiled"), base.get("unprofiled"))
    realised = None if base_prof is None or span is None or knob is None else base_prof - span
    return TryRow(
        label, answers, predicted, realised, span, _ratio(base_prof, span), timed_mean,
        _ratio(base_timed, timed_mean), clock, len(steady),
        OK if applied else NOT_APPLIED, notes if applied else str(prof.get("reason", "")), str(trace), diff,
    )


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f} ms"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render_text(result: TryResult) -> str:
    """The --try table as text, then one `tracekit diff` command per knob that ran."""
    head = (f"{'knob':16s} {'answers':18s} {'predicted':>11s} {'realised':>11s} {'profiled':>11s} {'speedup':>7s} "
            f"{'unprofiled':>11s} {'speedup':>7s} status")
    lines = [f"tracekit --try: {result.target} (per steady step; predicted: the saving the baseline's "
             "suggestion estimates; realised: baseline - knob, both profiled)",
             head]
    for r in result.rows:
        pred = "-" if r.predicted_us_per_step is None else "-" + _ms(r.predicted_us_per_step)
        clock = f" ({r.clock})" if r.clock == "wall" else ""
        real = "-" if r.realised_us_per_step is None else f"{-r.realised_us_per_step / 1000:+.3f} ms"
        lines.append(f"{r.knob:16s} {r.answers or '-':18s} {pred:>11s} {real:>11s} {_ms(r.profiled_us_per_step):>11s} "
                     f"{_x(r.profiled_speedup):>7s} {_ms(r.unprofiled_us_per_step) + clock:>11s} "
                     f"{_x(r.unprofiled_speedup):>7s} {r.status}" + (f": {r.reason}" if r.reason else ""))
    diffs = [r.diff_command for r in result.rows if r.diff_command]
    if diffs:
        lines += ["", "compare each knob with the baseline:"] + [f"  {d}" for d in diffs]
    return "\n".join(lines)
