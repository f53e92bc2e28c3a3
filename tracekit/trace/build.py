"""Turn decoded events into the Trace tables (columns per tables.py), chunk by chunk, before linking."""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.args import ANY, NO_ARGS, OP_COLUMN_KEYS, Args, external_id
from tracekit.trace.reader import Event
from tracekit.trace.route import Router
from tracekit.trace.store import OpInputStore
from tracekit.trace.times import ChunkTimes
from tracekit.trace.values import (
    INT64_MAX,
    NAN,
    all_ints,
    byte_count,
    dim3_columns,
    durations,
    id_array,
    in_int64,
    int_or,
    ints_or_none,
    norm_id,
    object_array,
    stream_of,
)

MAX_REL_US = 1e16  # an event this far from the file's first one: malformed
OPAQUE_BASE = 1 << 62  # ids beyond int64 become OPAQUE_BASE + k (k-th such id of the file)
_CAT = operator.attrgetter("cat")
_TS = operator.attrgetter("ts")
_DUR = operator.attrgetter("dur")
_NAME = operator.attrgetter("name")
_PH = operator.attrgetter("ph")
_ID = operator.attrgetter("id")
_DEVICE = operator.attrgetter("device")
_STREAM = operator.attrgetter("stream")
_BYTES = operator.attrgetter("bytes")
_EXTERNAL = operator.attrgetter("external_id")
_INPUTS = operator.attrgetter("input_dims", "input_types", "input_strides", "concrete_inputs")


@dataclass
class Pieces:
    """Column pieces of one table, one entry per chunk."""

    columns: dict[str, list] = field(default_factory=dict)

    def add(self, name: str, values: np.ndarray | Sequence[object]) -> None:
        self.columns.setdefault(name, []).append(values)

    def frame(self, order: tuple[str, ...]) -> pd.DataFrame:
        data: dict[str, Any] = {}
        for name in order:
            parts = self.columns.get(name, [])
            if not parts:
                data[name] = []
            elif all(isinstance(p, np.ndarray) for p in parts):
                data[name] = np.concatenate(parts)
            else:
                data[name] = [v for part in parts for v in part]
        return pd.DataFrame(data)


GPU_ORDER = (tables.GPU_NAME, tables.GPU_KIND, tables.GPU_TS, tables.GPU_DUR, tables.GPU_END, tables.GPU_DEVICE, tables.GPU_STREAM,
             tables.GPU_CORRELATION, tables.GPU_EXTERNAL_ID, *tables.GPU_GRID, *tables.GPU_BLOCK, tables.GPU_REGISTERS,
             tables.GPU_SHARED_MEM, tables.GPU_BLOCKS_PER_SM, tables.GPU_WARPS_PER_SM, tables.GPU_OCCUPANCY, tables.GPU_BYTES)
OP_ORDER = (tables.OP_NAME, tables.OP_PID, tables.OP_TID, tables.OP_TS, tables.OP_DUR, tables.OP_END, tables.OP_EXTERNAL_ID, tables.OP_SEQ,
            tables.OP_EXTRA)
RT_ORDER = (tables.RT_NAME, tables.RT_API, tables.RT_PID, tables.RT_TID, tables.RT_TS, tables.RT_DUR, tables.RT_END, tables.RT_CORRELATION,
            tables.RT_EXTERNAL_ID, tables.RT_KIND)
AN_ORDER = (tables.AN_NAME, tables.AN_GPU, tables.AN_PID, tables.AN_TID, tables.AN_TS, tables.AN_DUR, tables.AN_END)


@dataclass
class TableBuilder:
    """Accumulates the tables of one file from chunks of events."""

    gpu: Pieces = field(default_factory=Pieces)
    ops: Pieces = field(default_factory=Pieces)
    runtime: Pieces = field(default_factory=Pieces)
    annotations: Pieces = field(default_factory=Pieces)
    inputs: OpInputStore = field(default_factory=OpInputStore)
    flows: Pieces = field(default_factory=Pieces)  # start ('s') / end ('f') of ac2g flows
    memory: Pieces = field(default_factory=Pieces)  # [memory] instant events (profile_memory=True)
    python: Pieces = field(default_factory=Pieces)  # python_function events (with_stack / module names)
    missing_corr: dict[str, list[tuple]] = field(default_factory=lambda: {"gpu": [], "runtime": []})
    counts: Counter[str | None] = field(default_factory=Counter)  # events per category
    skipped: int = 0
    origin: int | None = None  # integer µs subtracted from every timestamp
    _names: dict[str, str] = field(default_factory=dict)
    _rows: Counter = field(default_factory=Counter)
    _runtime_kinds: dict[str, str] = field(default_factory=dict)
    _router: Router = field(default_factory=Router)
    _opaque: dict[int, int] = field(default_factory=dict)  # id beyond int64 -> its stand-in

    @property
    def legacy(self) -> bool:
        return self.counts.get("Kernel", 0) + self.counts.get("Operator", 0) + self.counts.get("Runtime", 0) > 0

    def add(self, events: list[Event], launch_op_args: dict[int, bytes], times: ChunkTimes) -> None:
        """Route each complete ('X') event of a chunk to its table and append its columns."""
        cats = list(map(_CAT, events))
        self.counts.update(cats)
        routed = self._router.route(events, cats, times.has_ts)
        self.skipped += routed.skipped
        ts = self._relative(times, routed.rows)
        out = routed.tables
        extras: list = ([launch_op_args.get(i) for i in routed.rows["ops"].tolist()] if launch_op_args
                        else [None] * len(out["ops"]))
        for table, events_of in out.items():
            if events_of:
                out[table], ts[table], keep = self._with_valid_times(events_of, ts[table])
                if keep is not None and table == "ops":
                    extras = list(itertools.compress(extras, keep))
        self._add_gpu(out["gpu"], ts["gpu"])
        self._add_ops(out["ops"], ts["ops"], extras)
        self._add_runtime(out["runtime"], ts["runtime"])
        self._add_annotations(out["annotations"], ts["annotations"])
        self._add_flows(routed.flows, ts["flows"])
        self._add_memory(routed.memory, ts["memory"])
        self._add_python(routed.python, ts["python"])

    def _relative(self, times: ChunkTimes, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Start times (float µs after `origin`) of each destination's rows. The origin is int() of the
        first usable time, looking at the destinations in `rows`' order; the destinations before it
        in that chunk get NaN (their times, all unusable, stay unusable)."""
        unset: set[str] = set()
        if self.origin is None:
            for name, r in rows.items():
                self.origin = times.origin_in(r) if len(r) else None
                if self.origin is not None:
                    break
                unset.add(name)
        return {name: np.full(len(r), NAN) if name in unset or self.origin is None
                else times.relative(r, self.origin) for name, r in rows.items()}

    def _name_list(self, events: list[Event]) -> list[str]:
        names = list(map(_NAME, events))
        return list(map(self._names.setdefault, names, names))

    def _with_valid_times(self, events: list[Event], ts: np.ndarray) -> tuple[list[Event], np.ndarray, list[bool] | None]:
        """(events, their start times `ts`, the keep mask or None) without the events whose start
        time is NaN, infinite or absurdly far (counted as skipped): one vectorized test per chunk, a
        list filter only when something is wrong."""
        ok = np.abs(ts) <= MAX_REL_US
        if ok.all():
            return events, ts, None
        self.skipped += int(len(events) - ok.sum())
        keep = ok.tolist()
        return list(itertools.compress(events, keep)), ts[ok], keep

    def _times(self, p: Pieces, events: list[Event], ts: np.ndarray, ts_col: str, dur_col: str,
               end_col: str) -> None:
        dur = durations(list(map(_DUR, events)))
        p.add(ts_col, ts)
        p.add(dur_col, dur)
        p.add(end_col, ts + dur)

    def _ints(self, p: Pieces, col: str, values: Iterable[int], *, ids: bool = False) -> None:
        """An int64 column; values past int64 become -1, or stand-in keys when `ids` (correlation
        and External ids are opaque keys: equal ids still link)."""
        values = list(values)
        try:
            p.add(col, np.fromiter(values, dtype=np.int64, count=len(values)))
        except OverflowError:
            values = [self._opaque_key(v) for v in values] if ids else in_int64(values)
            p.add(col, np.fromiter(values, dtype=np.int64, count=len(values)))

    def _int_attr(self, p: Pieces, col: str, args: list[Args], attr: str, *, ids: bool = False) -> list | None:
        """Column `col` from the `int | None` field `attr` of each args (None -> -1, as int_or);
        returns the values when one was None (else None)."""
        values = list(map(operator.attrgetter(attr), args))
        column = ints_or_none(values)
        if column is None:
            self._ints(p, col, (int_or(v) for v in values), ids=ids)
        else:
            p.add(col, column)
        return values if column is None or None in values else None

    def _external_ids(self, p: Pieces, col: str, args: list[Args]) -> None:
        values = list(map(_EXTERNAL, args))
        column = None if None in values else ints_or_none(values)
        if column is None:
            self._ints(p, col, [external_id(x) for x in args], ids=True)
        else:
            p.add(col, column)

    def _opaque_key(self, value: int) -> int:
        if -1 <= value <= INT64_MAX:
            return value
        if value < 0:
            return -1
        return self._opaque.setdefault(value, OPAQUE_BASE + len(self._opaque))

    def _note_missing(self, table: str, events: list[Event], correlations: list | None, ts: np.ndarray) -> None:
        """Remember the rows without a correlation id (`correlations`: the values when one may be None)."""
        base = self._rows[table]
        missing = [i for i, c in enumerate(correlations) if c is None] if correlations else []
        if missing:
            for i, t in zip(missing, ts[missing].tolist(), strict=True):
                self.missing_corr[table].append((base + i, norm_id(events[i].pid), norm_id(events[i].tid),
                                                 round(t, 3)))
        self._rows[table] += len(events)

    def _add_gpu(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        p = self.gpu
        a = [e.args or NO_ARGS for e in events]
        kind = tables.GPU_KIND_BY_CATEGORY
        p.add(tables.GPU_NAME, self._name_list(events))
        p.add(tables.GPU_KIND, list(map(kind.__getitem__, map(_CAT, events))))
        self._times(p, events, ts, tables.GPU_TS, tables.GPU_DUR, tables.GPU_END)
        devices = list(map(_DEVICE, a))
        if None in devices:
            devices = [d if d is not None else int_or(e.pid) for d, e in zip(devices, events, strict=True)]
        self._ints(p, tables.GPU_DEVICE, devices)
        streams = list(map(_STREAM, a))
        self._ints(p, tables.GPU_STREAM, streams if all_ints(streams)
                   else [stream_of(x, e.tid) for x, e in zip(a, events, strict=True)])
        correlations = self._int_attr(p, tables.GPU_CORRELATION, a, "correlation", ids=True)
        self._external_ids(p, tables.GPU_EXTERNAL_ID, a)
        for cols, values in ((tables.GPU_GRID, [x.grid for x in a]), (tables.GPU_BLOCK, [x.block for x in a])):
            dims = dim3_columns(values)
            for i, col in enumerate(cols):
                p.add(col, np.ascontiguousarray(dims[:, i]))
        self._int_attr(p, tables.GPU_REGISTERS, a, "registers")
        self._int_attr(p, tables.GPU_SHARED_MEM, a, "shared_mem")
        for col, attr in ((tables.GPU_BLOCKS_PER_SM, "blocks_per_sm"), (tables.GPU_WARPS_PER_SM, "warps_per_sm"),
                          (tables.GPU_OCCUPANCY, "occupancy")):  # float | None: None -> NaN as float_or_nan
            p.add(col, np.fromiter(map(operator.attrgetter(attr), a), dtype=np.float64, count=len(a)))
        sizes = list(map(_BYTES, a))  # int | str | None
        if set(map(type, sizes)) <= {int, type(None)}:
            self._int_attr(p, tables.GPU_BYTES, a, "bytes")
        else:
            self._ints(p, tables.GPU_BYTES, [int_or(v) for v in sizes])
        self._note_missing("gpu", events, correlations, ts)

    def _add_ops(self, events: list[Event], ts: np.ndarray, extras: list) -> None:
        if not events:
            return
        p = self.ops
        a = [e.args or NO_ARGS for e in events]
        p.add(tables.OP_NAME, self._name_list(events))
        p.add(tables.OP_PID, id_array([e.pid for e in events]))
        p.add(tables.OP_TID, id_array([e.tid for e in events]))
        self._times(p, events, ts, tables.OP_TS, tables.OP_DUR, tables.OP_END)
        self._external_ids(p, tables.OP_EXTERNAL_ID, a)
        self._int_attr(p, tables.OP_SEQ, a, "sequence_nr")
        p.add(tables.OP_EXTRA, object_array([None if raw is None else _extra(raw) for raw in extras]))
        self.inputs.append(list(itertools.chain.from_iterable(map(_INPUTS, a))))

    def _add_runtime(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        p = self.runtime
        a = [e.args or NO_ARGS for e in events]
        names = self._name_list(events)
        kinds = self._runtime_kinds
        for name in set(names) - kinds.keys():
            kinds[name] = tables.runtime_kind(name)
        p.add(tables.RT_NAME, names)
        p.add(tables.RT_API, list(map(tables.RUNTIME_API_BY_CATEGORY.get, map(_CAT, events), itertools.repeat("runtime"))))
        p.add(tables.RT_PID, id_array([e.pid for e in events]))
        p.add(tables.RT_TID, id_array([e.tid for e in events]))
        self._times(p, events, ts, tables.RT_TS, tables.RT_DUR, tables.RT_END)
        correlations = self._int_attr(p, tables.RT_CORRELATION, a, "correlation", ids=True)
        self._external_ids(p, tables.RT_EXTERNAL_ID, a)
        p.add(tables.RT_KIND, list(map(kinds.__getitem__, names)))
        self._note_missing("runtime", events, correlations, ts)

    def _add_flows(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        p = self.flows
        p.add("start", np.fromiter(map(operator.eq, map(_PH, events), itertools.repeat("s")), dtype=bool,
                                   count=len(events)))
        p.add("ts", ts)
        self._ints(p, "id", list(map(_ID, events)), ids=True)  # int ids only (route.py keeps no other)

    def _add_annotations(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        p = self.annotations
        p.add(tables.AN_NAME, self._name_list(events))
        p.add(tables.AN_GPU, np.fromiter(map(operator.eq, map(_CAT, events), itertools.repeat("gpu_user_annotation")),
                                         dtype=bool, count=len(events)))
        p.add(tables.AN_PID, id_array([e.pid for e in events]))
        p.add(tables.AN_TID, id_array([e.tid for e in events]))
        self._times(p, events, ts, tables.AN_TS, tables.AN_DUR, tables.AN_END)

    def _add_memory(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        events, ts, _ = self._with_valid_times(events, ts)
        a = [e.args or NO_ARGS for e in events]
        p = self.memory
        p.add(tables.MEM_TS, ts)
        p.add(tables.MEM_BYTES, np.array([byte_count(x.mem_bytes) for x in a], dtype=np.float64))
        p.add(tables.MEM_ALLOCATED, np.array([byte_count(x.total_allocated) for x in a], dtype=np.float64))
        p.add(tables.MEM_RESERVED, np.array([byte_count(x.total_reserved) for x in a], dtype=np.float64))
        self._ints(p, tables.MEM_DEVICE_TYPE, (int_or(x.device_type) for x in a))
        self._ints(p, tables.MEM_DEVICE_ID, (int_or(x.device_id) for x in a))
        self._ints(p, tables.MEM_ADDR, (int_or(x.addr) for x in a))
        p.add(tables.MEM_PID, id_array([e.pid for e in events]))
        p.add(tables.MEM_TID, id_array([e.tid for e in events]))
        p.add(tables.MEM_EXTERNAL_ID, np.full(len(events), -1, dtype=np.int64))

    def _add_python(self, events: list[Event], ts: np.ndarray) -> None:
        if not events:
            return
        events, ts, _ = self._with_valid_times(events, ts)
        p = self.python
        p.add(tables.PY_NAME, self._name_list(events))
        p.add(tables.PY_PID, id_array([e.pid for e in events]))
        p.add(tables.PY_TID, id_array([e.tid for e in events]))
        self._times(p, events, ts, tables.PY_TS, tables.PY_DUR, tables.PY_END)

    def python_table(self) -> pd.DataFrame:
        """The python_function events in file order (tables.PY_ORDER)."""
        return self.python.frame(tables.PY_ORDER)

    def memory_table(self) -> pd.DataFrame:
        """The [memory] events in file order (tables.MEM_ORDER)."""
        return self.memory.frame(tables.MEM_ORDER)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """gpu, ops, runtime, annotations frames in file order (correlations filled from flows)."""
        gpu = self.gpu.frame(GPU_ORDER)
        runtime = self.runtime.frame(RT_ORDER)
        self._fill_from_flows(gpu, "gpu", "f", tables.GPU_CORRELATION)
        self._fill_from_flows(runtime, "runtime", "s", tables.RT_CORRELATION)
        ops = self.ops.frame(OP_ORDER)
        annotations = self.annotations.frame(AN_ORDER)
        annotations[tables.AN_GPU] = annotations[tables.AN_GPU].astype(bool)
        return gpu, ops, runtime, annotations

    def _fill_from_flows(self, table: pd.DataFrame, name: str, phase: str, column: str) -> None:
        """Where an event lacks args.correlation, take the id of the flow (ac2g / async_cpu_to_gpu)
        of `phase` ('s' at the launch call, 'f' at the GPU activity) that starts or ends at the same
        time; a time shared by several such flows is ambiguous and left unlinked."""
        missing = self.missing_corr[name]
        if not missing or not self.flows.columns:
            return
        flows = self.flows.frame(("start", "ts", "id"))
        flows = flows[flows["start"] == (phase == "s")]
        keys = flows["ts"].round(3)
        unique = ~keys.duplicated(keep=False)
        ids = dict(zip(keys[unique].tolist(), flows["id"][unique].tolist(), strict=True))
        values = table[column].to_numpy().copy()
        for row, _pid, _tid, ts in missing:
            values[row] = ids.get(ts, -1)
        table[column] = values


def _extra(raw: bytes | None) -> dict | None:
    """All other args of a kernel-launching op (Inductor / Triton metadata), else None."""
    if raw is None:
        return None
    try:
        full = ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # e.g. a 400-digit number: no extra args
        return None
    return {k: v for k, v in full.items() if k not in OP_COLUMN_KEYS} if isinstance(full, dict) else None


def step_table(annotations: pd.DataFrame) -> pd.DataFrame:
    """ProfilerStep#N ranges on the CPU, one row per step, sorted by start."""
    cpu = annotations[~annotations[tables.AN_GPU]] if len(annotations) else annotations
    if len(cpu) == 0:
        return pd.DataFrame({tables.STEP_NUMBER: np.array([], dtype=np.int64), tables.STEP_NAME: [],
                             tables.STEP_TS: np.array([]), tables.STEP_DUR: np.array([]), tables.STEP_END: np.array([])})
    numbers = cpu[tables.AN_NAME].astype(str).str.extract(tables.STEP_NAME_RE.pattern, expand=False)
    rows = cpu[numbers.notna()]
    steps = pd.DataFrame({
        tables.STEP_NUMBER: numbers[numbers.notna()].astype(np.int64).to_numpy(),
        tables.STEP_NAME: rows[tables.AN_NAME].to_numpy(dtype=object),
        tables.STEP_TS: rows[tables.AN_TS].to_numpy(),
        tables.STEP_DUR: rows[tables.AN_DUR].to_numpy(),
        tables.STEP_END: rows[tables.AN_END].to_numpy(),
    })
    steps = steps.drop_duplicates(tables.STEP_NUMBER).sort_values(tables.STEP_TS, kind="stable")
    return steps.reset_index(drop=True)
