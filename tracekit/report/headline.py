"""The headline of a rank: the verdict sentence and rule, and the key-number tiles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.launch import LaunchTotals
from tracekit.analyzers.tracefacts import TraceFacts, device_label
from tracekit.jsonsafe import plain
from tracekit.report.meta import d2h_words, noisy_words, threads_text
from tracekit.report.tables import Bar
from tracekit.units import DASH, fmt_gbps, fmt_int, fmt_pct, fmt_tflops, fmt_time

if TYPE_CHECKING:
    from tracekit.analyzers.summary import AnalysisSummary
    from tracekit.suggestions.document import RankedSuggestion


@dataclass(frozen=True)
class Tile:
    label: str
    value: str
    sub: str = ""
    text: bool = False  # a name rather than a number: smaller, may wrap
    note: str = ""  # a second, quieter sub-line (where a number came from)
    title: str = ""  # the tile's tooltip: how the number was obtained


def verdict_rule(verdict: str) -> str:
    """How the verdict is chosen (tracekit.analyzers.totals), in one plain sentence."""
    from tracekit.analyzers.totals import CPU_ONLY, DOMINANT_SHARE, GPU_BOUND_SHARE

    if verdict == CPU_ONLY:
        return "How this is decided: the trace holds no kernel, copy or memset, so only CPU work was recorded."
    return (
        "How this is decided, over the steady steps: GPU-bound when the GPU computes (or waits only "
        f"on itself) at least {GPU_BOUND_SHARE:.0%} of the step; otherwise the largest reason it "
        f"waits names the verdict if it holds at least {DOMINANT_SHARE:.0%} of the rest — kernel "
        "launches (launch-bound), the DataLoader, host syncs, pageable copies or other CPU work "
        "(host-bound), collectives with no compute beside them (communication-bound) — and the "
        "verdict is mixed when no reason dominates."
    )


def verdict_label(verdict: str, cause: str | None, base: str) -> str:
    """'Host-bound · data loading', 'Mixed · CPU work + host syncs', 'GPU-bound'."""
    from tracekit.report.palette import CAUSE_LABELS

    if not cause:
        return base
    words = " + ".join(CAUSE_LABELS.get(c, c.replace("_", " ")) for c in cause.split("+"))
    return base if verdict == "launch-bound" or verdict == "communication-bound" else f"{base} · {words}"


def sentence(verdict: str, evidence: str, classes: Sequence[Bar]) -> str:
    """The analysis's evidence sentence, plus the largest kernel class when the kernels set the pace."""
    top = f" The largest class is {classes[0].label} ({classes[0].pct} of kernel time)." if classes else ""
    if verdict == "cpu-only":
        return "No GPU activity in this trace: only CPU work was recorded."
    return evidence + (top if verdict == "gpu-bound" else "")


def steps_summary(a: Analysis) -> tuple[str, tuple[str, ...]]:
    """Which steps the headline covers, and one line per step left out (with what it holds)."""
    scopes = {r.launch.scope for r in a.ranks}
    steady = sum(len(r.launch.steady_steps) for r in a.ranks)
    total = sum(len(r.launch.step_totals) for r in a.ranks)
    if scopes == {"trace"}:
        return ("No step marks: the numbers cover the first GPU launch to the end of the last GPU "
                "activity (the CPU work before and after is left out)."), ()
    mode = a.steps_mode
    how = " (steps inferred from the repeating op sequence)" if "inferred" in scopes else ""
    if mode == "steady":
        head = f"Numbers per step over the {steady} steady steps of {total}{how}."
    elif mode == "all":
        head = f"Numbers per step over all {total} steps{how}."
    else:
        head = f"Numbers per step over steps {mode} ({steady} of {total}){how}."
    from tracekit.analyzers.steady import excluded_lines

    return head, tuple(excluded_lines(a.excluded, multi=len(a.ranks) > 1)[:12])


HEADLINE_DTYPES = ("bf16", "fp16", "tf32", "fp32")  # the roof quoted in the device tile, first found


def _device_tile(a: Analysis, facts: TraceFacts) -> Tile:
    name = device_label(a.device, facts)
    if name is None:
        sub = "the trace does not name it" if facts.has_gpu else ""
        return Tile("Device", "unknown GPU" if facts.has_gpu else "no GPU", sub, text=True)
    if a.device is None:
        return Tile("Device", name, "not in tracekit's device table: no peaks", text=True)
    roofs = a.device.peak_tflops
    dtype = next((d for d in HEADLINE_DTYPES if d in roofs), next(iter(roofs), None))
    parts = [f"{fmt_tflops(roofs[dtype])} {dtype}"] if dtype is not None else []
    parts.append(fmt_gbps(a.device.memory_gbps))
    return Tile("Device", name, " · ".join(parts), text=True)


def _idle_tile(t: LaunchTotals, n: int) -> Tile:
    """GPU idle per step (n steps; 0: the whole trace): the union over streams, with the share of it
    spent waiting for the CPU."""
    idle, span = t.gpu_idle_us, t.span_us
    cpu_late = t.launch_gap_us + t.data_wait_us + t.sync_wait_us + t.copy_wait_us + t.cpu_wait_us
    sub = f"{fmt_pct(cpu_late / idle)} of it waits for the host" if idle > 0 and cpu_late > 0 else \
        (f"{fmt_pct(idle / span)} of span" if span else "")
    return Tile("GPU idle per step" if n else "GPU idle", fmt_time(idle / n if n else idle), sub,
                title="no kernel, copy or memset on any stream (the union over streams)")


def unprofiled_tile(a: Analysis) -> Tile | None:
    """The step as projected without the profiler (tracekit.model) beside the traced one, with where
    the profiler's cost came from; None when there is nothing to project or the model abstains
    (model_line says why)."""
    u = a.unprofiled
    if u is None or u.traced.gpu_ops == 0 or not u.trusted:
        return None
    n = max(u.projected.steps, 1)
    measured = f" · measured {fmt_time(u.measured_us)}{noisy_words(u, fmt_time)}" if u.measured_us is not None else ""
    title = (f"Each steady step's dependency graph replayed without the profiler's cost: "
             f"{u.per_event_us:.1f} µs per recorded CPU event and the launch calls' excess removed, from "
             f"{u.source_words}{d2h_words(u)}. Range {fmt_time(u.low.span_us / n)} – {fmt_time(u.high.span_us / n)}; the replay "
             f"of the traced steps is within {fmt_pct(u.replay_error)} of them.")
    label = "" if a.headline.undetermined else f" · {u.label}"  # no model verdict beside an undetermined one
    return Tile("Step without profiler", fmt_time(u.step_us), f"{fmt_time(u.traced_step_us)} traced{measured}{label}",
                note=f"profiler cost from {u.source_words}", title=title)


def model_line(a: Analysis) -> str:
    """One line when the execution model abstains on the rank's steady steps, with its reason."""
    u = a.unprofiled
    if u is None or u.traced.gpu_ops == 0 or u.trusted:
        return ""
    why = u.abstained[0][1] if u.abstained else "no steady step to replay"
    return (f"No projection without the profiler: the execution model abstains ({why}); "
            "the numbers are as traced, profiler overhead included.")


def tiles(a: Analysis, facts: TraceFacts) -> tuple[Tile, ...]:
    t = a.totals
    span, busy = t.span_us, t.gpu_busy_us
    marked = all(r.launch.scope != "trace" for r in a.ranks)
    n_steps = t.steps if marked else 0  # the steps the headline numbers cover (the steady ones)
    recorded = sum(len(r.launch.step_totals) for r in a.ranks)
    steps_tile = Tile(
        "Steps",
        fmt_int(n_steps) if n_steps else "none",
        (f"{fmt_time(span / n_steps)} per step" + (f" · {recorded} recorded" if recorded != n_steps else ""))
        if n_steps and span else "no ProfilerStep marks",
    )
    device_tile = _device_tile(a, facts)
    if not facts.has_gpu:
        cpu = facts.cpu
        return (
            Tile("Span", fmt_time(span), "whole trace"),
            Tile("CPU ops", fmt_int(cpu.ops), threads_text(cpu)),
            Tile("Top-level op time", fmt_time(cpu.top_level_us), "summed over threads"),
            Tile("Kernels", "0", "no GPU activity"),
            steps_tile,
            device_tile,
        )
    each = fmt_time(t.cpu_launch_us / t.launches) if t.launches else DASH
    model = unprofiled_tile(a)
    per = " per step" if n_steps else ""
    d = n_steps or 1  # the headline tiles are per steady step; without step marks, over the whole trace
    span_words = f"the {fmt_time(span / d)} step" if n_steps else f"the {fmt_time(span)} span"
    launches = t.launches / d
    return (
        *((model,) if model is not None else ()),
        Tile("GPU busy" + per, fmt_time(busy / d), f"{fmt_pct(busy / span) if span else DASH} of {span_words}"),
        Tile("CPU launch time" + per, fmt_time(t.cpu_launch_us / d),
             f"{_count(launches)} {'launch' if launches == 1 else 'launches'}{per} · {each} each"),
        _idle_tile(t, n_steps),
        Tile("Kernels" + per, _count(t.kernels / d), f"{fmt_int(t.kernels)} in total" if n_steps else "whole trace"),
        steps_tile,
        device_tile,
    )


def _count(x: float) -> str:
    """A count per step: whole numbers as integers, else one decimal."""
    return fmt_int(x) if float(x).is_integer() else f"{x:,.1f}"


def job_headline(summary: AnalysisSummary, suggestions: Sequence[RankedSuggestion]) -> tuple[str, str]:
    """(verdict label, biggest win) of a multi-rank run: the job's verdict over all ranks' steady
    steps (`summary`: the ranks' summaries added up), and the largest saving of any rank or of the
    cross-rank rules (`suggestions`, largest first), named with its rank ('rank 1: Load data in
    parallel … (~20.0 ms per step)')."""
    from tracekit.report.palette import VERDICTS

    verdict = summary.verdict
    label = verdict_label(verdict, summary.cause, VERDICTS.get(verdict, ("", verdict))[1]) if verdict else ""
    if not suggestions:
        return label, ""
    rank, top = suggestions[0]
    per_step = plain(top.per_step_us)
    saving = f"{fmt_time(per_step)} per step" if per_step is not None else fmt_time(plain(top.saving_us))
    where = f"rank {rank}: " if rank is not None else ""
    return label, f"{where}{top.title} (~{saving})"
