"""After a session: provenance, the trace file, the optional report, and the ProfileRun result."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.profile.export import check_output, report_path_for, write_trace
from tracekit.profile.session import RECORD_SHAPES, Session
from tracekit.trace.files import PROFILE_SUFFIX, trace_stem
from tracekit.trace.tables import DEBUG_MODES_KEY, GC_PAUSES_KEY, TRITON_TABLE_KEY
from tracekit.units import plural

if TYPE_CHECKING:
    from tracekit.pipeline.types import Analysis


@dataclass(frozen=True)
class ProfileRun:
    """What one profile produced: the trace file, its report (if written), and counts."""

    trace_path: Path
    report_path: Path | None = None
    steps: int = 0  # ProfilerStep#N annotations in the trace
    triton_launches: int = 0  # user Triton launches recorded with their arguments
    cuda: bool = False  # whether GPU activity was recorded
    report_error: str | None = None  # why the report could not be written (the trace was)
    report_note: str | None = None  # why no report was planned after all (the trace went to a device)
    verdict: str = ""  # the report's headline in one line: what bounds the step, the biggest win

    @cached_property
    def analysis(self) -> Analysis:
        """`tracekit.analyze(load_trace(trace_path))` of this trace, computed on first use."""
        from tracekit.pipeline.local import analyse_file

        return analyse_file(self.trace_path, with_suggestions=False).analysis


def report_writer() -> Callable[..., Any]:
    """`tracekit.pipeline.reports.produce_report` in this process (imported on first use: the report is
    the last step; a profiled run writes one trace per process, so there is nothing to spread)."""
    from functools import partial

    from tracekit.pipeline.reports import produce_report

    return partial(produce_report, jobs=1)


def plan_outputs(trace_path: Path, *, force: bool, report: bool) -> Path | None:
    """Check the trace path before anything runs; return where the report will go, if anywhere.

    An existing report is not an error: write_report picks a numbered name beside it.
    """
    check_output(trace_path, force)
    if not report:
        return None
    return report_path_for(trace_path)


def default_output(stem: str, *, unique: bool) -> Path:
    """STEM.trace.json.gz in the working directory; with unique, STEM-TIMESTAMP[-N] never clobbers."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem) or "profile"
    if not unique:
        return Path.cwd() / f"{safe}{PROFILE_SUFFIX}"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path.cwd() / f"{safe}-{stamp}{PROFILE_SUFFIX}"
    n = 2
    while path.exists():
        path = Path.cwd() / f"{safe}-{stamp}-{n}{PROFILE_SUFFIX}"
        n += 1
    return path


RANK_PLACEHOLDER = "{rank}"


def per_rank_path(path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The trace path of this process: `{rank}` in the file name becomes the launcher's RANK (0 when
    unset); under a multi-process launcher (torchrun sets RANK and WORLD_SIZE > 1) a name without
    the placeholder gets `.rank<R>` before its extension, so ranks never write the same file."""
    env = os.environ if environ is None else environ
    rank = env.get("RANK", "").strip()
    if RANK_PLACEHOLDER in path.name:
        return path.with_name(path.name.replace(RANK_PLACEHOLDER, rank if rank.isdigit() else "0"))
    if not rank.isdigit() or int(env.get("WORLD_SIZE", "1") or 1) <= 1:
        return path
    stem = trace_stem(path.name)
    return path.with_name(f"{stem}.rank{rank}{path.name[len(stem):]}")


def provenance(
    session: Session,
    *,
    mode: str,
    target: str,
    command: Sequence[str],
    warmup_calls: int = 0,
    exit_status: int = 0,
    record_command: bool = False,
) -> dict[str, Any]:
    """The top-level "tracekit" object of the trace: who recorded what, how, with which versions.

    Traces get shared: the command line and working directory (arguments can hold tokens, paths
    can be private) are written only with `record_command`; otherwise `target` is cut to the
    script's file name (or the module name)."""
    import torch

    from tracekit._version import __version__

    triton = sys.modules.get("triton")
    recorder = session.triton
    steps = session.recorded_steps()
    options = session.options
    meta: dict[str, Any] = {
        "version": __version__,
        "torch": str(torch.__version__),
        "triton": getattr(triton, "__version__", None),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "mode": mode,
        "target": target if record_command or mode != "script" else os.path.basename(target.rstrip("/\\")),
        "cuda": session.cuda,
        "device": torch.cuda.get_device_name() if session.cuda else None,
        "options": {
            "record_shapes": RECORD_SHAPES,
            "with_stack": options.with_stack,
            "profile_memory": options.memory,
            "warmup": options.warmup,
            "active": options.active,
        },
        "warmup_steps": options.warmup,
        "warmup_calls": warmup_calls,
        "steps_marked": session.marks,
        "step_source": session.step_source,
        "steps_recorded": len(steps),
        "first_step": steps[0] if steps else None,
        "triton_metadata": recorder.mode if recorder is not None else None,
        "triton_launches_wrapped": recorder.launches if recorder is not None else 0,
        "exit_status": exit_status,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if record_command:
        meta["command"] = list(command)
        meta["cwd"] = os.getcwd()
    if session.gc_pauses is not None:
        meta[GC_PAUSES_KEY] = "annotations"  # every garbage collection is a tracekit::gc annotation
    if session.debug is not None:
        meta[DEBUG_MODES_KEY] = dict(session.debug.seen)
    if recorder is not None:
        meta[TRITON_TABLE_KEY] = recorder.kernels
        if recorder.mode == "top_level":
            meta["triton_launches"] = recorder.records
    return meta


def finish(
    session: Session,
    trace_path: Path,
    meta: dict[str, Any],
    *,
    report_path: Path | None,
    force: bool,
) -> ProfileRun | None:
    """Write the trace (and the report when planned); None when the schedule recorded nothing."""
    if not session.trace_ready:
        return None
    trace_path = write_trace(session.profiler, trace_path, meta, drop_steps=session.dropped_steps(), force=force)
    report_error = None
    verdict = ""
    writer = report_writer() if report_path is not None else None
    report_note = None
    if writer is not None and not Path(trace_path).is_file():  # -o /dev/null, a FIFO: nothing to read back
        writer, report_note = None, f"no report: {trace_path} is not a regular file to read the trace back from"
    if writer is None:
        report_path = None
    else:
        try:
            written = writer(trace_path, report_path, force=force)
            if isinstance(written, (str, Path)):
                report_path = Path(written)
            elif hasattr(written, "path"):  # a WrittenReport: the path and the analysis behind it
                from tracekit.pipeline.reports import verdict_line

                report_path, verdict = Path(written.path), verdict_line(written.result)
        except Exception as exc:  # the trace is safe; say why the report is missing
            report_error = f"report not written: {type(exc).__name__}: {exc}"
            report_path = None
    recorder = session.triton
    return ProfileRun(
        trace_path=trace_path,
        report_path=report_path,
        steps=meta["steps_recorded"],
        triton_launches=recorder.launches if recorder is not None else 0,
        cuda=session.cuda,
        report_error=report_error,
        report_note=report_note,
        verdict=verdict,
    )


def nothing_recorded(session: Session, flag: str = "--warmup ") -> str:
    """Why a run left no trace: the schedule's warm-up outlasted the steps the run marked."""
    warmup = session.options.warmup
    return (
        f"no trace recorded: the run marked {plural(session.marks, 'step')}, but {flag}{warmup} "
        f"skips the first {warmup}"
    )
