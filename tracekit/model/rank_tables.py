"""Per-rank arrays the step graphs read: thread and stream codes, event start times per thread, stream free times."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import D2H_MIN_BYTES, PAGEABLE_D2H
from tracekit.analyzers.detectors.launch_blocking import blocking_calls
from tracekit.analyzers.kernel_patterns import CLASS_RULES
from tracekit.analyzers.kernels import COMMUNICATION, classify_name
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

# A cheap first look: only names a communication row of the class table matches are classified
_COMM_HINT = re.compile("|".join(f"(?:{rule.name})" for rule in CLASS_RULES if rule.value == COMMUNICATION))
STREAM_WAIT_APIS = ("cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent")


def _thread_codes(parts: list[tuple[pd.Series, pd.Series]]) -> list[np.ndarray]:
    """One integer per (pid, tid) shared by every table in `parts`: the thread a row ran on."""
    sizes = [len(pid) for pid, _ in parts]
    pid_codes = pd.factorize(np.concatenate([pid.to_numpy() for pid, _ in parts]))[0]
    tid_codes, tid_values = pd.factorize(np.concatenate([tid.to_numpy() for _, tid in parts]))
    codes = pid_codes.astype(np.int64) * (len(tid_values) + 1) + tid_codes
    return np.split(codes, np.cumsum(sizes)[:-1])


@dataclass(frozen=True, eq=False)
class RankTables:
    """A rank's columns as arrays, thread codes shared by runtime calls, ops and annotations."""

    rt_thread: np.ndarray
    rt_ts: np.ndarray
    rt_dur: np.ndarray
    rt_kind: np.ndarray
    rt_name: np.ndarray
    gpu_launch: np.ndarray
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_stream: np.ndarray
    gpu_free: np.ndarray  # end of the latest earlier activity on the same stream (-inf: none)
    gpu_collective: np.ndarray
    gpu_d2h_bytes: np.ndarray  # bytes of a bulk pageable device-to-host copy (hostside.D2H_MIN_BYTES), else 0
    event_starts: dict[int, np.ndarray]  # thread code -> sorted start times of its ops and annotations
    step_thread: dict[int, int]  # ProfilerStep number -> thread code of its mark
    stream_waits: bool  # the trace holds cudaStreamWaitEvent calls
    rt_blocking: np.ndarray  # per runtime call: a kernel launch that returned after its kernel (launch_blocking.blocking_calls)

    def events_between(self, threads: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Number of recorded CPU events (ops, annotations) of thread `threads[i]` starting in [start, end)."""
        out = np.zeros(len(threads), dtype=np.int64)
        for code in np.unique(threads):
            starts = self.event_starts.get(int(code))
            if starts is None:
                continue
            rows = threads == code
            counts = np.searchsorted(starts, end[rows], side="left") - np.searchsorted(starts, start[rows], side="left")
            out[rows] = np.maximum(counts, 0)
        return out

    def stream_free_before(self, nodes: np.ndarray) -> np.ndarray:
        return self.gpu_free[nodes]


def _stream_free(gpu: pd.DataFrame, stream: np.ndarray) -> np.ndarray:
    """Per activity, the latest end among the activities that started before it on its stream."""
    ts = gpu[tables.GPU_TS].to_numpy(dtype=float)
    end = gpu[tables.GPU_END].to_numpy(dtype=float)
    order = np.lexsort((ts, stream))
    frame = pd.DataFrame({"s": stream[order], "e": end[order]})
    running = frame.groupby("s", sort=False)["e"].cummax().to_numpy()
    before = np.full(len(order), -np.inf)
    same = np.zeros(len(order), dtype=bool)
    same[1:] = frame["s"].to_numpy()[1:] == frame["s"].to_numpy()[:-1]
    before[1:] = np.where(same[1:], running[:-1], -np.inf)
    out = np.empty(len(order))
    out[order] = before
    return out


def rank_tables(rank: RankTrace) -> RankTables:
    """The arrays of `rank` that every step graph of it reads."""
    runtime, gpu, ops, notes = rank.runtime, rank.gpu, rank.ops, rank.annotations
    cpu_notes = notes[~notes[tables.AN_GPU].astype(bool)] if len(notes) else notes
    own_ops = ops[ops[tables.OP_TS].notna()] if len(ops) else ops
    rt_code, op_code, an_code = _thread_codes([
        (runtime[tables.RT_PID], runtime[tables.RT_TID]), (own_ops[tables.OP_PID], own_ops[tables.OP_TID]),
        (cpu_notes[tables.AN_PID], cpu_notes[tables.AN_TID])])
    ev_code = np.concatenate([op_code, an_code])
    ev_ts = np.concatenate([own_ops[tables.OP_TS].to_numpy(dtype=float) if len(own_ops) else np.empty(0),
                            cpu_notes[tables.AN_TS].to_numpy(dtype=float) if len(cpu_notes) else np.empty(0)])
    order = np.lexsort((ev_ts, ev_code))
    sorted_codes, sorted_ts = ev_code[order], ev_ts[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    event_starts = {int(part_codes[0]): part_ts for part_codes, part_ts in
                    zip(np.split(sorted_codes, bounds), np.split(sorted_ts, bounds), strict=True) if len(part_codes)}
    step_thread: dict[int, int] = {}
    if len(cpu_notes):
        names = cpu_notes[tables.AN_NAME].to_numpy(dtype=object)
        for i in np.flatnonzero(pd.Series(names).str.match(tables.STEP_NAME_RE.pattern).to_numpy()):
            step_thread.setdefault(int(str(names[i]).split("#", 1)[1]), int(an_code[i]))
    stream = _thread_codes([(gpu[tables.GPU_DEVICE], gpu[tables.GPU_STREAM])])[0]
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    kinds = gpu[tables.GPU_KIND].to_numpy(dtype=object)
    collective = np.zeros(len(gpu), dtype=bool)
    kernel_names = pd.unique(names[kinds == tables.KIND_KERNEL]) if len(gpu) else []
    comm_names = {n for n in kernel_names if _COMM_HINT.search(str(n)) and classify_name(str(n))[0] == COMMUNICATION}
    if comm_names:
        collective = np.isin(names, list(comm_names)) & (kinds == tables.KIND_KERNEL)
    d2h = np.zeros(len(gpu))
    if len(gpu):
        copy = kinds == tables.KIND_MEMCPY
        nbytes = gpu[tables.GPU_BYTES].to_numpy(dtype=float)
        bulk = copy & (nbytes >= D2H_MIN_BYTES)
        if bulk.any():
            bulk[bulk] = [bool(PAGEABLE_D2H.search(str(n))) for n in names[bulk]]
            d2h = np.where(bulk, nbytes, 0.0)
    rt_names = runtime[tables.RT_NAME].to_numpy(dtype=object) if len(runtime) else np.empty(0, dtype=object)
    return RankTables(
        rt_thread=np.asarray(rt_code, dtype=np.int64),
        rt_ts=runtime[tables.RT_TS].to_numpy(dtype=float) if len(runtime) else np.empty(0),
        rt_dur=runtime[tables.RT_DUR].to_numpy(dtype=float) if len(runtime) else np.empty(0),
        rt_kind=runtime[tables.RT_KIND].to_numpy(dtype=object) if len(runtime) else np.empty(0, dtype=object),
        rt_name=rt_names,
        gpu_launch=gpu[tables.GPU_LAUNCH].to_numpy(dtype=np.int64),
        gpu_ts=gpu[tables.GPU_TS].to_numpy(dtype=float), gpu_dur=gpu[tables.GPU_DUR].to_numpy(dtype=float),
        gpu_stream=np.asarray(stream, dtype=np.int64),
        gpu_free=_stream_free(gpu, np.asarray(stream)) if len(gpu) else np.empty(0),
        gpu_collective=collective, gpu_d2h_bytes=d2h, event_starts=event_starts, step_thread=step_thread,
        stream_waits=bool(np.isin(rt_names, STREAM_WAIT_APIS).any()),
        rt_blocking=blocking_calls(rank),
    )
