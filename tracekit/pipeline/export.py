"""`tracekit export`: the original trace plus tracekit's results as Chrome-trace events for Perfetto.

The original events are copied through as bytes (kernel events gain `args.tracekit_class`); tracekit
adds, under its own process: a track with the verdict of each step, counters for the GPU busy share
and the launch queue depth, the top suggestion's evidence as a marked range with instant events, and
the critical path of each modelled steady step (tracekit.model.critical) with its traced and
projected unprofiled span.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import msgspec

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.kernels import CLASS, OTHER
from tracekit.analyzers.timeline import QueueDepth, launch_queue_depth
from tracekit.errors import OutputError, TraceFormatError
from tracekit.model.critical import critical_segments
from tracekit.model.outlook import RankModel
from tracekit.output import check_target, write_stream
from tracekit.paths import export_path
from tracekit.pipeline.export_raw import PID, BadEvents, annotated, is_ours, offset_in, raw_chunks
from tracekit.pipeline.local import analyse_trace, load_file
from tracekit.suggestions import Suggestion
from tracekit.trace import tables
from tracekit.trace.files import read_bytes, trace_files
from tracekit.trace.inputs import collect_inputs
from tracekit.trace.model import RankTrace
from tracekit.trace.reader import BadJSON, NotATrace, open_document

TID_VERDICT, TID_SUGGESTION, TID_PATH = 1, 2, 3
PATH_TRACK = "tracekit: critical path"
_ENC = msgspec.json.Encoder()


def _meta(rank: int) -> list[dict[str, Any]]:
    pid = PID + rank
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"tracekit · rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_VERDICT, "args": {"name": "verdict per step"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_SUGGESTION, "args": {"name": "top suggestion"}},
    ]


class Exported(NamedTuple):
    """What export wrote: the file, how many events it added, and why a track is missing ('' when none is)."""

    path: Path
    added: int
    note: str = ""
    warnings: tuple[str, ...] = ()  # what loading the trace warned about (a skipped capture file)


def path_events(model: RankModel | None, origin: float) -> tuple[list[dict[str, Any]], str]:
    """(events, note): the critical-path track of every modelled steady step, one complete event per
    segment (named by its kind, the step in args; the replay of the recorded durations, so on the
    trace's own times) and an instant per step with its traced and projected unprofiled span; no
    events and the model's reason when it abstains."""
    if model is None:
        return [], "no critical-path track: the rank was not modelled"
    if not model.steps:
        why = model.unprofiled.abstained[0][1] if model.unprofiled.abstained else model.fidelity.reason
        return [], f"no critical-path track: the execution model abstains ({why})"
    pid = PID + model.rank
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_PATH, "args": {"name": PATH_TRACK}}]
    for s in model.steps:
        g = s.graph
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID_PATH, "cat": "tracekit",
                    "name": f"tracekit step {g.step}: {g.traced_span_us / 1e3:.3f} ms traced, "
                            f"{s.projected.span_us / 1e3:.3f} ms projected without the profiler",
                    "ts": origin + g.window_start_us,
                    "args": {"step": g.step, "traced_span_us": g.traced_span_us,
                             "projected_span_us": s.projected.span_us}})
        for seg in critical_segments(g):
            out.append({"ph": "X", "pid": pid, "tid": TID_PATH, "cat": "tracekit", "name": seg.kind,
                        "ts": origin + seg.start_us, "dur": seg.length_us, "args": {"step": g.step}})
    return out, ""


def _step_events(a: Analysis, origin: float) -> list[dict[str, Any]]:
    """One slice per step named 'tracekit step N: verdict' (search for it in Perfetto)."""
    ra = a.ranks[0]
    steps = ra.launch.steps
    phases = steps["phase"].astype(str).tolist() if "phase" in steps else ["steady"] * len(steps)
    out = []
    for (_, row), totals, phase in zip(steps.iterrows(), ra.launch.step_totals, phases, strict=True):
        n = int(row["step"])
        label = f"tracekit step {n}" if n >= 0 else "tracekit whole trace"
        out.append({
            "ph": "X", "pid": PID + ra.rank, "tid": TID_VERDICT, "cat": "tracekit",
            "name": f"{label}: {totals.verdict}" + ("" if phase == "steady" else f" ({phase})"),
            "ts": origin + float(row["ts"]), "dur": float(row["end"] - row["ts"]),
            "args": {"phase": phase, "span_us": totals.span_us, "gpu_busy_us": totals.gpu_busy_us,
                     "cpu_launch_us": totals.cpu_launch_us, "launches": totals.launches, "kernels": totals.kernels},
        })
    return out


def _counters(a: Analysis, queue: QueueDepth, origin: float) -> Iterator[dict[str, Any]]:
    """The GPU busy share per timeline bin and the launch queue depth, as counter events (made
    from their own small copies: the analysis can be freed before the trace is copied)."""
    ra = a.ranks[0]
    pid = PID + ra.rank
    tl = ra.timeline
    busy = (tl.t0_us, tl.bin_us, tuple(tl.rows[0].busy)) if tl is not None and tl.rows else None
    return _counter_events(pid, busy, queue, origin)


def _counter_events(pid: int, busy: tuple[float, float, tuple[float, ...]] | None, queue: QueueDepth,
                    origin: float) -> Iterator[dict[str, Any]]:
    if busy is not None:
        t0, width, shares = busy
        for i, share in enumerate(shares):
            yield {"ph": "C", "pid": pid, "name": "GPU busy %", "ts": origin + t0 + i * width,
                   "args": {"busy": round(100 * share, 1)}}
    for ts, depth in zip(queue.ts, queue.depth, strict=True):
        yield {"ph": "C", "pid": pid, "name": "launch queue depth", "ts": origin + ts, "args": {"queued": depth}}


def _suggestion_events(a: Analysis, top: Suggestion | None, origin: float) -> list[dict[str, Any]]:
    """The top suggestion as a range over the worst steady step, and an instant per evidence row with a step."""
    if top is None:
        return []
    ra = a.ranks[0]
    steps = ra.launch.steps
    if not len(steps):
        return []
    steady = steps[steps["phase"] == "steady"] if "phase" in steps else steps
    pick = steady if len(steady) else steps
    worst = pick.loc[(pick["end"] - pick["ts"]).idxmax()]
    pid = PID + ra.rank
    evidence = [{k: v for k, v in row.items()} for row in top.evidence[:20]]
    out = [{
        "ph": "X", "pid": pid, "tid": TID_SUGGESTION, "cat": "tracekit",
        "name": f"tracekit suggestion: {top.title}", "ts": origin + float(worst["ts"]),
        "dur": float(worst["end"] - worst["ts"]),
        "args": {"id": top.id, "saving_us": top.saving_us, "saving_pct": top.saving_pct, "formula": top.formula,
                 "evidence": evidence},
    }]
    starts = dict(zip(steps["step"].astype(int), steps["ts"].astype(float), strict=True))
    for row in top.evidence:
        step = row.get("step")
        if isinstance(step, int) and step in starts:
            out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID_SUGGESTION, "cat": "tracekit",
                        "name": f"evidence: step {step}", "ts": origin + starts[step], "args": dict(row)})
    return out


def _classes_by_correlation(rank: RankTrace, a: Analysis) -> tuple[dict[int, str], dict[str, str]]:
    """Kernel class by correlation id, and by kernel name for kernels without one."""
    cls = a.ranks[0].classification.table[CLASS].astype(str).to_numpy()
    corr = rank.gpu[tables.GPU_CORRELATION].to_numpy()
    names = rank.gpu[tables.GPU_NAME].astype(str).to_numpy()
    by_corr = {int(c): str(k) for c, k in zip(corr, cls, strict=True) if c == c and int(c) >= 0}
    by_name = {str(n): str(k) for n, k in zip(names, cls, strict=True)}
    return by_corr, by_name


class _Buffered:
    """Writes gathered into ~1 MB blocks (events are small; a long one goes through at once)."""

    def __init__(self, out: BinaryIO | gzip.GzipFile) -> None:
        self.out, self.buf = out, io.BytesIO()

    def write(self, data: bytes) -> None:
        if len(data) > 1 << 20:
            self.flush()
            self.out.write(data)
            return
        self.buf.write(data)
        if self.buf.tell() > 1 << 20:
            self.flush()

    def flush(self) -> None:
        self.out.write(self.buf.getvalue())
        self.buf = io.BytesIO()


def _write_events(out: BinaryIO | gzip.GzipFile, events: memoryview, extra: Sequence[dict[str, Any]] | Iterator[dict[str, Any]],
                  by_corr: Mapping[int, str], by_name: Mapping[str, str]) -> int:
    """The original events (kernel events annotated, an earlier export's own events dropped), then
    tracekit's, as one JSON array, streamed event by event; returns how many were added."""
    buf = _Buffered(out)
    buf.write(b"[")
    first = True
    for items in raw_chunks(events):
        for raw in map(bytes, items):
            if is_ours(raw):
                continue
            if not first:
                buf.write(b",")
            buf.write(annotated(raw, by_corr, by_name, OTHER))
            first = False
    added = 0
    for event in extra:
        if not first:
            buf.write(b",")
        buf.write(_ENC.encode(event))
        first = False
        added += 1
    buf.write(b"]")
    buf.flush()
    return added


class _Additions(NamedTuple):
    """What export adds to a trace, computed before the copy (the loaded trace freed by then)."""

    extra: list[dict[str, Any]]
    counters: Iterator[dict[str, Any]]
    by_corr: dict[int, str]
    by_name: dict[str, str]
    note: str
    warnings: tuple[str, ...] = ()  # what loading the trace warned about


def _additions(path: Path) -> _Additions:
    trace = load_file(path)
    rank = trace.rank()
    result = analyse_trace(trace, rank=rank.rank)
    a, suggestions = result.analysis, result.suggestions
    origin = float(rank.meta.origin_us)
    track, note = path_events(result.models[0] if result.models else None, origin)
    extra: list[dict[str, Any]] = [*_meta(rank.rank), *_step_events(a, origin),
                                   *_suggestion_events(a, suggestions[0] if suggestions else None, origin), *track]
    by_corr, by_name = _classes_by_correlation(rank, a)
    return _Additions(extra, _counters(a, launch_queue_depth(rank), origin), by_corr, by_name, note,
                      tuple(trace.warnings))


def export(trace_path: str | Path, out_path: str | Path, *, force: bool = False) -> Exported:
    """Write TRACE plus tracekit's events to `out_path` (gzip when it ends in .gz); the path written,
    the events added and why the critical-path track is missing (the model abstains)."""
    files = trace_files(trace_path)
    if len(files) != 1:
        raise TraceFormatError(f"{trace_path}: export takes one trace file (this holds {len(files)}); "
                               "pass one rank's file")
    out_path = Path(out_path)
    inputs = collect_inputs(files[0]).files  # the trace and the capture traces found beside it
    check_target(out_path, inputs=inputs, force=force)  # one line, before the long work
    add = _additions(Path(files[0]))
    raw = read_bytes(Path(files[0]))
    try:
        doc = open_document(raw)
    except (BadJSON, NotATrace) as exc:
        raise TraceFormatError(f"{files[0]}: {exc}") from None
    start = offset_in(raw, doc.events_raw)  # the array the loader read (escaped, duplicated keys too)
    if start < 0:
        raise TraceFormatError(f"{files[0]}: cannot find the traceEvents array in the file")
    end = start + len(doc.events_raw)
    added = [0]

    def write(fh: BinaryIO) -> None:
        stream: BinaryIO | gzip.GzipFile = (
            gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) if out_path.name.endswith(".gz") else fh)
        try:
            stream.write(raw[:start])
            added[0] = _write_events(stream, doc.events_raw, _chain(add.extra, add.counters), add.by_corr,
                                     add.by_name)
            stream.write(raw[end:])
        except BadEvents as exc:
            raise TraceFormatError(f"{files[0]}: {exc}") from None
        finally:
            if stream is not fh:
                stream.close()

    target = write_stream(out_path, write, force=force, inputs=inputs)
    return Exported(target, added[0], add.note, add.warnings)


def rank_files(trace_path: str | Path) -> list[Path]:
    """The trace files TRACE names (one, or every rank file of a directory)."""
    return trace_files(trace_path)


def export_ranks(trace_path: str | Path, out_dir: str | Path | None, *, force: bool = False) -> list[Exported]:
    """Each rank file of the directory `trace_path` exported on its own (`export`) into `out_dir`
    (default: DIR.annotated beside it), as RANKFILE_STEM.annotated.json.gz: one file per rank."""
    files = trace_files(trace_path)
    src = Path(trace_path)
    target = Path(out_dir) if out_dir is not None else src.with_name(f"{src.resolve().name}.annotated")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{target}: cannot create the output directory ({exc.strerror or type(exc).__name__})") from None
    return [export(f, target / export_path(f).name, force=force) for f in files]


def _chain(first: Sequence[dict[str, Any]], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from first
    yield from rest


