"""Weight normalisation left on at inference: every call of a weight-normed layer recomputes its weight as g · v / ‖v‖ (`torch.nn.utils.parametrizations.weight_norm`, the older `weight_norm` hook), a kernel and its Python per layer per call, where the weight could be computed once.

HiFi-GAN, WaveGlow and other vocoders, and TTS and speech models trained with weight normalisation,
call `remove_weight_norm()` (`torch.nn.utils.parametrize.remove_parametrizations(m, "weight")`)
before inference: the same weights, computed once. heldout14 hifigan_weight_norm (H100): 78
convolutions, 312 `aten::_weight_norm` calls a step; removing them took the bare step from 23.0 to
16.4 ms.

A step counts when, on one thread, at least MIN_NORMS top-level NORM_OPS calls run and the step runs
no backward (BACKWARD: in training the normalisation is the model's; its gradient needs it). One row
per step and thread; per rank.runtime row, whether one of those calls issued it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.accumulation import BACKWARD
from tracekit.analyzers.detectors.toplevel import StepOps, TopLevel
from tracekit.analyzers.names import matches
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_NORMS = 4  # per step and thread: a layer or two is a small share; a normed network calls dozens
# torch/nn/utils/parametrizations.py _WeightNorm.forward and torch/nn/utils/weight_norm.py compute_weight
# both call torch._weight_norm, whose CUDA path is _weight_norm_interface
NORM_OPS = frozenset({"aten::_weight_norm", "aten::_weight_norm_interface"})

# --- columns of Patterns.weight_norm (one row per step × thread) ------------------------------------
WN_STEP = "step"
WN_NORMS = "norms"  # weights recomputed in the step on the thread
WN_CALLS = "calls"  # runtime calls they issued
WN_HOST_US = "host_us"  # Σ of the calls' op durations
WN_GPU_US = "gpu_us"  # their kernels' time
WEIGHT_NORM_COLUMNS = (WN_STEP, WN_NORMS, WN_CALLS, WN_HOST_US, WN_GPU_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(WEIGHT_NORM_COLUMNS))


@dataclass(frozen=True)
class WeightNorms:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: issued by a weight recomputation


def find_weight_norms(rank: RankTrace, seqs: tuple[StepOps, ...], top: TopLevel) -> WeightNorms:
    """WEIGHT_NORM_COLUMNS per step and thread of an inference step with at least MIN_NORMS weight
    recomputations, and their runtime calls."""
    rt, ops = rank.runtime, rank.ops
    none = WeightNorms(empty(), np.zeros(len(rt), dtype=bool))
    if not len(rt) or not len(ops) or not seqs:
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    is_norm = np.isin(names, list(NORM_OPS))
    if not is_norm.any():
        return none
    start, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    gpu_dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float)
    mine = np.zeros(len(ops), dtype=bool)
    rows: list[dict[str, object]] = []
    for step in seqs:
        if matches(names[step.rows], BACKWARD).any():
            continue
        for _, seq in step.threads:
            norms = seq[is_norm[seq]]
            if len(norms) < MIN_NORMS:
                continue
            mine[norms] = True
            these = np.zeros(len(ops), dtype=bool)
            these[norms] = True
            rows.append({WN_STEP: step.step, WN_NORMS: len(norms),
                         WN_CALLS: int(((top.rt_top >= 0) & these[np.maximum(top.rt_top, 0)]).sum()),
                         WN_HOST_US: float((end[norms] - start[norms]).sum()),
                         WN_GPU_US: float(gpu_dur[(top.gpu_top >= 0) & these[np.maximum(top.gpu_top, 0)]].sum())})
    if not rows:
        return none
    return WeightNorms(pd.DataFrame(rows, columns=list(WEIGHT_NORM_COLUMNS)),
                       (top.rt_top >= 0) & mine[np.maximum(top.rt_top, 0)])
