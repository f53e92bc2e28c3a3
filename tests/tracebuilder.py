"""Build tiny synthetic Kineto traces in code, in either schema, for tests with known answers."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000, "computeMajor": 9,
        "computeMinor": 0, "numSms": 132}


@dataclass
class TraceBuilder:
    """Collects events; ids (External id, correlation) are handed out in order.

    legacy=True writes the 2021 schema (Operator/Kernel/Runtime, lower-case 'external id')."""

    legacy: bool = False
    pid: int = 100
    tid: int = 100
    device: int = 0
    stream: int = 7
    events: list[dict] = field(default_factory=list)
    top: dict[str, Any] = field(default_factory=lambda: {"schemaVersion": 1, "deviceProperties": [H200]})
    _next_ext: int = 1
    _next_corr: int = 1000

    # --- categories and arg names of the two schemas ---
    def _cat(self, new: str) -> str:
        legacy = {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime",
                  "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
        return legacy.get(new, new) if self.legacy else new

    def _ext_key(self) -> str:
        return "external id" if self.legacy else "External id"

    def op(self, name: str, ts: float, dur: float, tid: int | None = None, **args: Any) -> int:
        """A CPU op; returns its External id."""
        ext = self._next_ext
        self._next_ext += 1
        self.events.append({"ph": "X", "cat": self._cat("cpu_op"), "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur,
                            "args": {self._ext_key(): ext, **args}})
        return ext

    def annotation(self, name: str, ts: float, dur: float, gpu: bool = False) -> None:
        ext = self._next_ext
        self._next_ext += 1
        cat = "gpu_user_annotation" if gpu else "user_annotation"
        pid, tid = (self.device, self.stream) if gpu else (self.pid, self.tid)
        if self.legacy and not gpu:
            cat = "Operator"
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                            "dur": dur, "args": {self._ext_key(): ext}})

    def launch(self, ts: float, dur: float, kernel: str | None, k_ts: float, k_dur: float, *,
               ext: int | None = None, api: str = "cudaLaunchKernel", cat: str = "cuda_runtime",
               kind: str = "kernel", tid: int | None = None, flows: bool = False,
               args_correlation: bool = True, stream: int | None = None, **kernel_args: Any) -> int:
        """A launch call plus the GPU activity it starts; returns the correlation id."""
        corr = self._next_corr
        self._next_corr += 1
        rt_args: dict[str, Any] = {"correlation": corr} if args_correlation else {}
        if ext is not None:
            rt_args[self._ext_key()] = ext
        launcher_tid = self.tid if tid is None else tid
        self.events.append({"ph": "X", "cat": self._cat(cat), "name": api, "pid": self.pid,
                            "tid": launcher_tid, "ts": ts, "dur": dur, "args": rt_args})
        if kernel is not None:
            self.gpu(kernel, k_ts, k_dur, corr if args_correlation else None, ext=ext, kind=kind,
                     stream=stream, **kernel_args)
        if flows:
            fcat = "ac2g"
            self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": launcher_tid, "ts": ts,
                                "cat": fcat, "name": fcat})
            self.events.append({"ph": "f", "id": corr, "pid": self.device,
                                "tid": self.stream if stream is None else stream, "ts": k_ts,
                                "cat": fcat, "name": fcat, "bp": "e"})
        return corr

    def gpu(self, name: str, ts: float, dur: float, corr: int | None, *, ext: int | None = None,
            kind: str = "kernel", stream: int | None = None, **args: Any) -> None:
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        a: dict[str, Any] = {"device": self.device, "stream": self.stream if stream is None else stream}
        if corr is not None:
            a["correlation"] = corr
        if ext is not None:
            a[self._ext_key()] = ext
        if kind == "kernel":
            a.update({"grid": [4, 1, 1], "block": [128, 1, 1], "registers per thread": 32})
        a.update(args)
        self.events.append({"ph": "X", "cat": self._cat(cat), "name": name, "pid": self.device,
                            "tid": a["stream"], "ts": ts, "dur": dur, "args": a})

    def raw(self, event: Any) -> None:
        self.events.append(event)

    def document(self, bare: bool = False) -> Any:
        return list(self.events) if bare else {**self.top, "traceEvents": list(self.events)}

    def write(self, path: Path, bare: bool = False) -> Path:
        text = json.dumps(self.document(bare))
        if str(path).endswith(".gz"):
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        return path


@dataclass
class Cursor:
    """Ops with one kernel each, laid back to back: a 2 µs CPU op (with its Input Dims and Input type)
    launching 0.5 µs in, the kernel at the GPU cursor; then the CPU moves on 3 µs and the GPU the
    kernel's time + 1 µs."""

    b: TraceBuilder
    cpu: float
    gpu: float

    def kernel(self, op: str, name: str, dur: float, dims: list, types: list) -> None:
        ext = self.b.op(op, self.cpu, 2, **{"Input Dims": dims, "Input type": types})
        self.b.launch(self.cpu + 0.5, 1, name, self.gpu, dur, ext=ext)
        self.cpu += 3
        self.gpu += dur + 1
