"""Patterns the suggestion rules read: kernel sequences (sequences.py) and host-side stalls (hostside.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers import kernels as K
from tracekit.analyzers import names as N
from tracekit.analyzers.costs.attribution import KernelCosts
from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.detectors import hostside as H
from tracekit.analyzers.detectors import sequences as S
from tracekit.analyzers.kernels import KernelClassification
from tracekit.analyzers.windows import StepWindows
from tracekit.jsonsafe import records
from tracekit.trace import tables as T
from tracekit.trace.model import RankTrace, TraceMeta

TRAINING = re.compile(r"Backward|^autograd::engine|^Optimizer\.step")


@dataclass(frozen=True)
class Patterns:
    """One rank's patterns; each table's columns are the constants of sequences.py / hostside.py."""

    rank: int
    num_sms: int | None  # streaming multiprocessors of the device (deviceProperties), None unknown
    chains: pd.DataFrame  # S.CHAIN_COLUMNS: elementwise/normalization chains
    loops: pd.DataFrame  # S.LOOP_COLUMNS: same-shape GEMM loops
    attention: pd.DataFrame  # S.ATTENTION_COLUMNS: unfused attention
    syncs: pd.DataFrame  # H.SY_*: host synchronisation calls
    copies: pd.DataFrame  # H.CP_*: pageable host-to-device copies
    dataloader: pd.DataFrame  # H.DL_*: DataLoader time per step
    comm: pd.DataFrame  # H.CM_*: communication vs compute per step
    training: bool = False  # the trace runs a backward pass or an optimizer step

    def to_dict(self) -> dict[str, Any]:
        tables = ("chains", "loops", "attention", "syncs", "copies", "dataloader", "comm")
        return {"rank": self.rank, "num_sms": self.num_sms,
                **{name: records(getattr(self, name), {S.LP_SHAPES: format_shapes})
                   for name in tables}}


def _num_sms(meta: TraceMeta) -> int | None:
    props = meta.device
    value = props.get("numSms") if isinstance(props, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def find_patterns(rank: RankTrace, classification: KernelClassification,
                  costs: KernelCosts | None = None, *, windows: StepWindows | None = None,
                  rows: np.ndarray | None = None) -> Patterns:
    """All patterns of one RankTrace; `classification` is kernels.classify(rank), `costs` the
    estimate_costs result (None: FLOP/byte columns stay unknown, loops are not searched).
    `windows` gives every row its step (default: the trace's ProfilerStep columns); `rows` (bool per
    GPU row) limits the kernel sequences to those activities (the headline steps)."""
    steps = H.StepsOf.of(rank, windows)
    classes = classification.table[K.CLASS].to_numpy(dtype=object)
    libraries = classification.table[K.LIBRARY].to_numpy(dtype=object)
    attention, covered = S.find_attention(rank, classes, costs, rows=rows)
    return Patterns(
        rank=int(rank.rank),
        num_sms=_num_sms(rank.meta),
        chains=S.find_chains(rank, classes, libraries, costs, skip=covered, rows=rows),
        loops=S.find_loops(rank, classes, costs, rows=rows),
        attention=attention,
        syncs=H.find_syncs(rank, steps),
        copies=H.find_copies(rank, steps),
        dataloader=H.find_dataloader(rank, steps),
        comm=H.find_comm(rank, classes, steps),
        training=bool(len(rank.ops)) and bool(N.matches(rank.ops[T.OP_NAME], TRAINING).any()),
    )
