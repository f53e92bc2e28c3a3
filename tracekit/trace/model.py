"""The Trace model: per-rank pandas tables of GPU activities, CPU ops, API calls and steps (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace import tables
from tracekit.trace.bare import BareSteps
from tracekit.trace.store import OpInputStore


@dataclass(frozen=True)
class TraceMeta:
    """What a trace file says about where and how it was recorded."""

    schema_version: Any = None
    schema: str = "kineto"  # 'kineto' (current categories) | 'legacy' (2021 capitalised categories)
    platform: str = "cpu"  # 'cuda' | 'rocm' | 'cpu' (no GPU activity)
    device_properties: tuple[dict, ...] = ()
    device_name: str | None = None  # the device the GPU activities ran on
    device_id: int | None = None
    distributed: dict | None = None
    versions: dict = field(default_factory=dict)  # cuda/cupti/hip/torch versions found in the file
    base_time_ns: int | None = None
    tracekit: dict | None = None  # provenance written by `tracekit profile`, if any
    bare: BareSteps | None = None  # the steps timed without the profiler (`tracekit profile`), if any
    origin_us: int = 0  # table times are µs after this file timestamp (shared by all ranks of a Trace)

    @property
    def device(self) -> dict | None:
        """The deviceProperties entry of the device the kernels ran on, if the trace has one."""
        for props in self.device_properties:
            if props.get("id") == self.device_id:
                return props
        return self.device_properties[0] if self.device_properties else None


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace: its tables, linked by row positions (-1 means no link)."""

    rank: int
    path: str
    meta: TraceMeta
    gpu: pd.DataFrame
    ops: pd.DataFrame
    runtime: pd.DataFrame
    annotations: pd.DataFrame
    steps: pd.DataFrame
    counts: dict[str, int]
    skipped: int = 0
    op_input_store: OpInputStore | None = field(default=None, repr=False, compare=False)
    warnings: tuple[str, ...] = ()  # what the loader ignored in this file (wrong-typed fields)
    memory: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(tables.MEM_ORDER)))  # [memory] events
    python: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(tables.PY_ORDER)))  # python_function

    def op_inputs(self, row: int) -> dict[str, Any]:
        """Input dims/types/strides/concrete inputs of op `row`, decoded on demand (the loader
        decodes them up front only for ops that issued GPU work and their ancestors)."""
        if self.op_input_store is not None:
            return self.op_input_store.row(row)
        cols = (tables.OP_INPUT_DIMS, tables.OP_INPUT_TYPES, tables.OP_INPUT_STRIDES, tables.OP_CONCRETE_INPUTS)
        return {col: self.ops[col].iat[row] for col in cols}

    def input_values(self, rows: np.ndarray, column: str) -> list[Any]:
        """op_inputs(r)[column] for each of `rows`, without decoding the other columns."""
        if self.op_input_store is not None:
            return self.op_input_store.values(rows, column)
        return self.ops[column].to_numpy()[rows].tolist()

    @property
    def kernels(self) -> pd.DataFrame:
        """GPU kernel rows only (memcpy and memset excluded)."""
        return self.gpu[self.gpu[tables.GPU_KIND] == tables.KIND_KERNEL]

    @property
    def launches(self) -> pd.DataFrame:
        """Runtime/driver calls that put work on the GPU (kernel, memcpy, memset, graph launches)."""
        return self.runtime[self.runtime[tables.RT_KIND].isin(tables.LAUNCH_KINDS)]

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu) > 0


@dataclass(frozen=True)
class Trace:
    """A loaded trace: one RankTrace per rank, in rank order."""

    path: str
    ranks: dict[int, RankTrace]
    warnings: tuple[str, ...] = ()

    def rank(self, rank: int | None = None) -> RankTrace:
        """The trace of `rank`, or of the lowest rank when None."""
        if rank is None:
            return self.ranks[min(self.ranks)]
        try:
            return self.ranks[rank]
        except KeyError:
            from tracekit.errors import TraceFormatError

            known = ", ".join(str(r) for r in sorted(self.ranks))
            raise TraceFormatError(f"{self.path}: no rank {rank} in this trace (ranks: {known})") from None
