"""Patterns the suggestion rules read: kernel sequences (sequences.py) and host-side stalls (hostside.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors import hostside as H
from tracekit.analyzers.detectors import sequences as S
from tracekit.jsonsafe import records


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

    def to_dict(self) -> dict[str, Any]:
        tables = ("chains", "loops", "attention", "syncs", "copies", "dataloader", "comm")
        return {"rank": self.rank, "num_sms": self.num_sms,
                **{name: records(getattr(self, name)) for name in tables}}


def _num_sms(meta) -> int | None:
    props = meta.device if hasattr(meta, "device") else None
    value = props.get("numSms") if isinstance(props, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def find_patterns(rank, classification: Any, costs: Any = None) -> Patterns:
    """All patterns of one RankTrace; `classification` is kernels.classify(rank), `costs` the
    costs.estimate_costs result (None: FLOP/byte columns stay unknown, loops are not searched)."""
    n = len(rank.gpu)
    table = getattr(classification, "table", None)
    classes = table["class"].to_numpy(dtype=object) if table is not None else np.full(n, "other", dtype=object)
    libraries = table["library"].to_numpy(dtype=object) if table is not None else np.full(n, "other", dtype=object)
    attention, covered = S.find_attention(rank, classes, costs)
    return Patterns(
        rank=int(rank.rank),
        num_sms=_num_sms(rank.meta),
        chains=S.find_chains(rank, classes, libraries, costs, skip=covered),
        loops=S.find_loops(rank, classes, costs),
        attention=attention,
        syncs=H.find_syncs(rank),
        copies=H.find_copies(rank),
        dataloader=H.find_dataloader(rank),
        comm=H.find_comm(rank, classes),
    )
