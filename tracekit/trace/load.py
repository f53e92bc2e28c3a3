"""load_trace: the one way in. Path (file or per-rank directory) -> Trace, with one-line errors."""

from __future__ import annotations

import ast
import gc
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.errors import TraceFormatError
from tracekit.terminal import visible
from tracekit.trace import build, files, graphs, link, tables
from tracekit.trace.bare import BARE_KEY, parse_bare
from tracekit.trace.inputs import found_captures, unique_files
from tracekit.trace.model import RankTrace, Trace, TraceMeta
from tracekit.trace.reader import TOO_DEEP, BadJSON, Document, NotATrace, open_document
from tracekit.trace.store import OpInputStore
from tracekit.trace.stream import Fallback, StreamDocument

Progress = Callable[[str], None]
_VERSION_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "hip_runtime_version",
                 "hip_driver_version", "roctracer_version")


def load_trace(path: str | os.PathLike, *, progress: Progress | None = None,
               max_bytes: int | None = None, captures: Sequence[str | os.PathLike] = ()) -> Trace:
    """Load a PyTorch profiler trace (.json, .json.gz, or a directory of per-rank traces).

    `max_bytes` caps the JSON size of each file (default: $TRACEKIT_MAX_TRACE_BYTES, else derived
    from available memory; see files.byte_budget). `captures`: traces recorded around CUDA/HIP graph
    capture (files or directories); a `capture_traces/` folder beside the trace (or inside its
    directory) is used too. Graph-replayed kernels get the ops of the launches captured there
    (trace.graphs). Raises TraceFormatError (one line naming the file and the problem) when it
    cannot."""
    paths, notes = unique_files(files.trace_files(path))
    loaded: list[RankTrace] = []
    warnings: list[str] = [*notes, *files.irregular_entries(path)]
    for p in paths:
        if progress:
            progress(f"reading {p.name}")
        try:
            loaded.append(load_file(p, progress=progress, max_bytes=max_bytes))
        except TraceFormatError as exc:
            if len(paths) == 1:
                raise
            warnings.append(f"skipped {exc}")
    if not loaded:
        raise TraceFormatError(f"{path}: none of the {len(paths)} files is a readable trace "
                               f"({'; '.join(w.removeprefix('skipped ') for w in warnings[:3])})")
    ranks = _assign_ranks(_common_origin(loaded))
    ranks = _join_graphs(ranks, _load_captures(path, captures, progress, max_bytes, warnings), warnings)
    for r in ranks.values():
        warnings.extend(r.warnings)
        if r.skipped:
            warnings.append(f"{r.path}: skipped {r.skipped} malformed events")
        if not r.has_gpu:
            warnings.append(f"{r.path}: CPU-only trace (no GPU kernels, memcpy or memset)")
    return Trace(path=str(path), ranks=ranks, warnings=tuple(warnings))


def _load_captures(path: str | os.PathLike, captures: Sequence[str | os.PathLike],
                   progress: Progress | None, max_bytes: int | None, warnings: list[str]) -> list[RankTrace]:
    """The capture traces named (errors are fatal) plus those of a capture_traces/ folder found
    beside or inside `path`; a found file that is not a readable trace (a manifest such as
    execution_details.json) is skipped with one warning naming it."""
    named = [p for c in captures for p in files.trace_files(c)]
    found, out = found_captures(Path(path)), []
    warnings.extend(files.irregular_entries(files.capture_folder(path)))
    for p in unique_files([*named, *found])[0]:
        if progress:
            progress(f"reading capture {p.name}")
        try:
            out.append(load_file(p, progress=progress, max_bytes=max_bytes))
        except TraceFormatError as exc:
            if p in named:
                raise
            warnings.append(f"skipped {files.CAPTURE_DIR}/ file {exc}")
    return out


def _join_graphs(ranks: dict[int, RankTrace], captures: list[RankTrace],
                 warnings: list[str]) -> dict[int, RankTrace]:
    """Each rank with its graph replays joined to `captures` (trace.graphs); notes go to warnings."""
    notes: dict[str, None] = {}
    out = {}
    for k, r in ranks.items():
        result = graphs.join_graphs(r, captures)
        out[k] = result.rank
        notes.update(dict.fromkeys(result.notes))
    warnings.extend(notes)
    return out


def _common_origin(loaded: list[RankTrace]) -> list[RankTrace]:
    """Shift every rank's times to the earliest rank's origin, so ranks line up on one clock."""
    origin = min(r.meta.origin_us for r in loaded)
    out = []
    for r in loaded:
        shift = float(r.meta.origin_us - origin)
        if shift:
            for table in (r.gpu, r.ops, r.runtime, r.annotations, r.steps, r.memory, r.python):
                for col in ("ts", "end"):
                    if col in table:
                        table[col] = table[col] + shift
            r = RankTrace(**{**r.__dict__, "meta": replace(r.meta, origin_us=origin)})
        out.append(r)
    return out


def _assign_ranks(loaded: list[RankTrace]) -> dict[int, RankTrace]:
    """Rank from distributedInfo, else from the file name, else 0; duplicates get the next free rank."""
    out: dict[int, RankTrace] = {}
    for r in loaded:
        rank = r.rank
        while rank in out:
            rank += 1
        out[rank] = r if rank == r.rank else RankTrace(**{**r.__dict__, "rank": rank})
    return dict(sorted(out.items()))


def load_file(path: Path, progress: Progress | None = None, max_bytes: int | None = None) -> RankTrace:
    """Load one trace file into a RankTrace."""
    was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived containers; nothing here makes reference cycles
    try:
        return _load_file(path, progress, max_bytes)
    except RecursionError:
        raise TraceFormatError(f"{path}: {TOO_DEEP}") from None
    except MemoryError:
        raise TraceFormatError(f"{path}: out of memory while loading (lower --max-trace-bytes to refuse "
                               "such files early, or use a machine with more memory)") from None
    finally:
        if was_enabled:
            gc.enable()


def _decoded(path: Path, progress: Progress | None, max_bytes: int | None) -> tuple[dict[str, Any], int, build.TableBuilder]:
    """(top-level metadata, events skipped, the builder holding every event): the text decoded as it
    is read or inflated (trace.stream), or, when that declines, from the whole text."""
    plain = files.plain_blocks(path, max_bytes)
    if plain is not None:
        try:
            return _filled(path, StreamDocument(*plain), progress)
        except Fallback:
            plain[0].close()  # (closes the file now, not when the cycle is collected)
    raw, limit, explicit = files.read_raw(path, max_bytes)
    if files.is_gzip(raw):
        try:
            blocks = files.inflate(raw, limit, bomb_guard=not explicit)
            return _filled(path, StreamDocument(blocks, files.size_hint(raw, limit, not explicit)), progress)
        except Fallback:
            pass
    text = files.decompressed(path, raw, limit, explicit)
    del raw
    try:
        return _filled(path, open_document(text), progress)
    except (BadJSON, NotATrace) as exc:
        raise TraceFormatError(f"{path}: {exc}") from None


def _filled(path: Path, doc: Document | StreamDocument, progress: Progress | None
            ) -> tuple[dict[str, Any], int, build.TableBuilder]:
    builder = build.TableBuilder()
    for events, launch_op_args, times in doc.chunks():
        builder.add(events, launch_op_args, times)
        if progress:
            progress(f"reading {path.name}: {100 * doc.done:.0f}%")
    return doc.top, doc.skipped + builder.skipped, builder


def _load_file(path: Path, progress: Progress | None, max_bytes: int | None) -> RankTrace:
    top, skipped, builder = _decoded(path, progress, max_bytes)
    gpu, ops, runtime, annotations = builder.tables()
    if len(gpu) + len(ops) + len(runtime) + len(annotations) == 0:
        raise TraceFormatError(f"{path}: not a PyTorch profiler trace (no GPU activity, CPU ops, "
                               "runtime calls or annotations)")

    ops, op_order = _sorted(ops, tables.OP_TS, tables.OP_DUR)
    builder.inputs.seal(op_order)
    runtime, _ = _sorted(runtime, tables.RT_TS, tables.RT_DUR)
    gpu, _ = _sorted(gpu, tables.GPU_TS, tables.GPU_DUR)
    annotations, _ = _sorted(annotations, tables.AN_TS, tables.AN_DUR)
    steps = build.step_table(annotations)

    depth, parent = link.nest_ops(ops)
    ops[tables.OP_DEPTH] = depth
    ops[tables.OP_PARENT] = parent
    ops[tables.OP_STEP] = link.step_of(ops[tables.OP_TS].to_numpy(), steps)
    runtime[tables.RT_OP] = link.issuing_ops(runtime, ops)
    runtime[tables.RT_STEP] = link.step_of(runtime[tables.RT_TS].to_numpy(), steps)
    annotations[tables.AN_STEP] = link.step_of(annotations[tables.AN_TS].to_numpy(), steps)

    launch = link.link_launches(gpu, runtime)
    gpu[tables.GPU_LAUNCH] = launch
    linked = launch >= 0
    safe = np.maximum(launch, 0)
    gpu[tables.GPU_OP] = np.where(linked, runtime[tables.RT_OP].to_numpy()[safe] if len(runtime) else -1, -1)
    step_by_time = link.step_of(gpu[tables.GPU_TS].to_numpy(), steps)
    gpu[tables.GPU_STEP] = np.where(linked, runtime[tables.RT_STEP].to_numpy()[safe] if len(runtime) else -1,
                               step_by_time)

    python, _ = _sorted(builder.python_table(), tables.PY_TS, tables.PY_DUR)
    memory = builder.memory_table().sort_values(tables.MEM_TS, kind="stable").reset_index(drop=True)
    memory[tables.MEM_OP] = link.issuing_ops(memory, ops)  # file order kept at equal times: the totals run in it
    memory[tables.MEM_STEP] = link.step_of(memory[tables.MEM_TS].to_numpy(), steps)
    _decode_inputs(ops, builder.inputs, _ops_to_decode(ops, gpu))
    ignored: list[str] = []
    meta = _meta(top, gpu, runtime, builder.legacy, builder.origin or 0, ignored)
    if builder.inputs.rejected:
        ignored.append(f"{builder.inputs.rejected} op input values (Input Dims/type/Strides, Concrete Inputs) "
                       "of the wrong type")
    warnings = (f"{path}: ignored {', '.join(ignored)}",) if ignored else ()
    return RankTrace(rank=_rank(top, path), path=str(path), meta=meta, gpu=gpu, ops=ops,
                     runtime=runtime, annotations=annotations, steps=steps, counts=_counts(builder.counts),
                     skipped=skipped, op_input_store=builder.inputs, warnings=warnings, memory=memory,
                     python=python)


def _counts(counts: Mapping[str | None, int]) -> dict[str, int]:
    return {str(k): int(v) for k, v in counts.items() if k is not None}


def _decode_inputs(ops: pd.DataFrame, store: OpInputStore, rows: np.ndarray) -> None:
    """Input columns: decoded lists for `rows`, None elsewhere (RankTrace.op_inputs decodes any)."""
    decoded = store.decode_rows(rows)
    for col, values in decoded.items():
        column = np.full(len(ops), None, dtype=object)
        column[rows] = np.fromiter(values, dtype=object, count=len(values))  # (np.array would unpack the lists)
        ops[col] = column


def _ops_to_decode(ops: pd.DataFrame, gpu: pd.DataFrame) -> np.ndarray:
    """Rows whose shapes get decoded at load: ops that issued GPU work and their ancestors
    (all ops of a CPU-only trace)."""
    if len(gpu) == 0:
        return np.arange(len(ops))
    rows = np.unique(gpu[tables.GPU_OP].to_numpy())
    rows = rows[rows >= 0]
    parent = ops[tables.OP_PARENT].to_numpy()
    seen = np.zeros(len(ops), dtype=bool)  # each op is climbed from once: O(n) however deep the nesting
    seen[rows] = True
    while len(rows):
        rows = parent[rows]
        rows = np.unique(rows[rows >= 0])
        rows = rows[~seen[rows]]
        seen[rows] = True
    return np.flatnonzero(seen).astype(np.int64)


def _sorted(table: pd.DataFrame, ts: str, dur: str) -> tuple[pd.DataFrame, np.ndarray | None]:
    """Rows by start time, enclosing (longer) events first at equal starts; fresh RangeIndex.
    Also returns the permutation applied (None when the rows were already in order)."""
    if len(table) == 0:
        return table.reset_index(drop=True), None
    order = np.lexsort((-table[dur].to_numpy(), table[ts].to_numpy()))
    if (np.diff(order) == 1).all():
        return table, None
    return table.iloc[order].reset_index(drop=True), order


def _rank(top: dict[str, Any], path: Path) -> int:
    info = top.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and 0 <= info["rank"] < 1 << 31:
        return info["rank"]
    from_name = files.rank_from_name(path)
    return from_name if from_name is not None else 0


# deviceProperties keys tracekit reads -> the types a value may have
DEVICE_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (int,), "name": (str,), "totalGlobalMem": (int, float), "computeMajor": (int,),
    "computeMinor": (int,), "numSms": (int,), "maxThreadsPerBlock": (int,),
    "maxThreadsPerMultiprocessor": (int,), "regsPerBlock": (int,), "regsPerMultiprocessor": (int,),
    "warpSize": (int,), "sharedMemPerBlock": (int,), "sharedMemPerMultiprocessor": (int,),
    "sharedMemPerBlockOptin": (int,), "memoryClockRate": (int, float), "clockRate": (int, float),
    "memoryBusWidth": (int,), "l2CacheSize": (int,),
}
MAX_META_DEPTH = 8  # nested metadata (distributedInfo, tracekit) deeper than this is cut off
MAX_TEXT = 10_000  # metadata strings are cut to this many characters


def _device_properties(value: object, ignored: list[str]) -> tuple[dict, ...]:
    """deviceProperties is a list of objects, or in some files a Python repr string of one. Known
    keys of the wrong type (or absurd numbers) are dropped and noted in `ignored`."""
    if isinstance(value, str):
        if len(value) > 1 << 20:
            ignored.append("deviceProperties (a string longer than 1 MB)")
            return ()
        try:
            value = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return ()
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        if value is not None:
            ignored.append(f"deviceProperties (a {type(value).__name__}, not a list)")
        return ()
    out, dropped = [], set()
    for entry in value:
        if not isinstance(entry, dict):
            dropped.add("entry")
            continue
        clean = {}
        for key, v in entry.items():
            want = DEVICE_FIELDS.get(key)
            if want is None:
                clean[key] = _bounded(v)
            elif isinstance(v, want) and not isinstance(v, bool) and _sane_number(v):
                clean[key] = v[:MAX_TEXT] if isinstance(v, str) else v
            else:
                dropped.add(str(key)[:40])
        out.append(clean)
    if dropped:
        ignored.append(f"deviceProperties fields of the wrong type ({', '.join(sorted(dropped))})")
    return tuple(out)


def _sane_number(v: object) -> bool:
    return not isinstance(v, (int, float)) or (v == v and abs(v) < 1e18)


def _bounded(value: object, depth: int = 0) -> object:
    """`value` with containers nested deeper than MAX_META_DEPTH cut to None and long strings cut,
    so that printing or re-encoding metadata never recurses without bound."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) < 1 << 63 else None
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if depth >= MAX_META_DEPTH:
        return None
    if isinstance(value, dict):
        return {str(k)[:MAX_TEXT]: _bounded(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value]
    return None


def _meta(top: dict[str, Any], gpu: pd.DataFrame, runtime: pd.DataFrame, legacy: bool,
          origin: int, ignored: list[str]) -> TraceMeta:
    props = _device_properties(top.get("deviceProperties"), ignored)
    device_id = None
    if len(gpu):
        devices = gpu[tables.GPU_DEVICE]
        devices = devices[devices >= 0]
        if len(devices):
            device_id = int(devices.mode().iat[0])
    match = next((p for p in props if p.get("id") == device_id), None)
    if match is None and props and (device_id is None or len(props) == 1):
        match = props[0]
    rocm = (top.get("hip_runtime_version") is not None or top.get("roctracer_version") is not None
            or (len(runtime) > 0 and runtime[tables.RT_NAME].str.startswith("hip").any()))
    platform = "cpu" if len(gpu) == 0 else ("rocm" if rocm else "cuda")
    info = _bounded(top.get("distributedInfo"))
    raw_tk = top.get(tables.TRACEKIT_KEY)
    tk = _bounded(raw_tk)
    bare = parse_bare(raw_tk.get(BARE_KEY), ignored) if isinstance(raw_tk, dict) else None
    versions = {k: _bounded(top[k]) for k in _VERSION_KEYS if top.get(k) is not None}
    base = top.get("baseTimeNanoseconds")
    return TraceMeta(
        schema_version=_bounded(top.get("schemaVersion")),
        schema="legacy" if legacy else "kineto",
        platform=platform,
        device_properties=props,
        device_name=match["name"] if match and isinstance(match.get("name"), str) else None,
        device_id=device_id,
        distributed=info if isinstance(info, dict) else None,
        versions={k: v for k, v in versions.items() if isinstance(v, (str, int, float))},
        base_time_ns=base if isinstance(base, int) and not isinstance(base, bool) and abs(base) < 1 << 63 else None,
        tracekit=tk if isinstance(tk, dict) else None,
        bare=bare,
        origin_us=origin,
    )


def stderr_progress(quiet: bool = False, after_s: float = 1.0) -> Progress | None:
    """A progress callback for the CLI: prints to stderr once loading has taken `after_s`, only
    when stderr is a terminal and not quiet."""
    if quiet or not sys.stderr.isatty():
        return None
    start = time.monotonic()

    def report(message: str) -> None:
        if time.monotonic() - start >= after_s:
            sys.stderr.write(f"\rtracekit: {visible(message)}\x1b[K")
            sys.stderr.flush()

    return report
