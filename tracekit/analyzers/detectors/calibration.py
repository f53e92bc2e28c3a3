"""Calibration left on at inference: a quantizer's histogram calibrator collecting statistics in every forward of a model that already runs its quantized ops, work whose result nothing reads.

A quantizer calibrates once, on a few batches, with its quantization off; then its scales are loaded
and calibration is switched off (pytorch-quantization / ModelOpt `TensorQuantizer.disable_calib()`,
torch.ao `disable_observer`). Left on, each quantizer's call still runs the calibrator on its input
before quantizing it. pytorch-quantization's `HistogramCalibrator.collect`: `torch.min(x) < 0` read on
the host, `x.abs()`, a float32 copy, `torch.max`, range compares read on the host, `torch.histc` over
the range, the running histogram added in; torch.ao's `HistogramObserver.forward`: `torch.aminmax`,
then `torch.histc`. heldout14 fp8_calibrator_on (H100): 32 calibrators a step took 15.9 ms of a
step that is 6.2 ms with calibration off, bare.

A calibrator is a top-level `aten::histc` / `aten::histogram` call (HISTOGRAMS) with the ops around it
on its thread that read its input or only scalars and one-dimensional tensors (the running
histogram and its edges): going back, ops of BEFORE; going on, ops of AFTER. A step counts when it
holds at least MIN_CALIBRATORS of them and at least one quantized op (QUANTIZED: the model applies the
quantization the calibrators are still measuring; a calibration run itself has its quantization
off). One row per step and thread; per rank.runtime row, whether a calibrator's op issued it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.toplevel import StepOps, TopLevel
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_CALIBRATORS = 2  # per step and thread: one histogram may be the user's own statistic
HISTOGRAMS = frozenset({"aten::histc", "aten::histogram"})
# pytorch-quantization calib/histogram.py HistogramCalibrator.collect and torch/ao/quantization/
# observer.py HistogramObserver.forward: the range of the input and its host reads, before the histogram
BEFORE = frozenset({"aten::min", "aten::max", "aten::amin", "aten::amax", "aten::aminmax", "aten::abs",
                    "aten::to", "aten::_to_copy", "aten::copy_", "aten::detach", "aten::lt", "aten::gt",
                    "aten::le", "aten::ge", "aten::eq", "aten::ne", "aten::is_nonzero", "aten::item",
                    "aten::_local_scalar_dense", "aten::select"})
# the same files: the running histogram grown to the new range and the new counts added in
AFTER = frozenset({"aten::zeros", "aten::zero_", "aten::fill_", "aten::add_", "aten::add", "aten::copy_",
                   "aten::slice", "aten::cat", "aten::select", "aten::item", "aten::_local_scalar_dense",
                   "aten::is_nonzero", "aten::linspace", "aten::min", "aten::max"})
# ops that run a quantized model's arithmetic or quantize for it (torch/_meta_registrations.py names;
# fake quantization is QAT's and a calibrated model's simulated quantization)
QUANTIZED = frozenset({"aten::_scaled_mm", "aten::_int_mm", "aten::_weight_int8pack_mm", "aten::_weight_int4pack_mm",
                       "aten::fake_quantize_per_tensor_affine", "aten::fake_quantize_per_channel_affine",
                       "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
                       "aten::fake_quantize_per_tensor_affine_cachemask", "aten::fake_quantize_per_channel_affine_cachemask",
                       "aten::quantize_per_tensor", "aten::quantize_per_channel"})

# --- columns of Patterns.calibration (one row per step × thread) ------------------------------------
CB_STEP = "step"
CB_CALIBRATORS = "calibrators"  # histograms collected in the step on the thread
CB_OPS = "ops"  # the most common calibrator's ops, in words
CB_CALLS = "calls"  # runtime calls of the calibrators (launches, copies, syncs)
CB_SYNCS = "syncs"  # of them, syncs (the host reads of the range)
CB_HOST_US = "host_us"  # Σ per calibrator: its first op's start to its last op's end (the waits included)
CB_GPU_US = "gpu_us"  # the calibrators' kernel and copy time
CALIBRATION_COLUMNS = (CB_STEP, CB_CALIBRATORS, CB_OPS, CB_CALLS, CB_SYNCS, CB_HOST_US, CB_GPU_US)
OPS_CHARS = 160  # of CB_OPS (op names are untrusted text)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CALIBRATION_COLUMNS))


@dataclass(frozen=True)
class Calibration:
    table: pd.DataFrame
    calls: np.ndarray  # per rank.runtime row: a calibrator's call


def _dims(rank: RankTrace, row: int) -> list[list[int]]:
    got = rank.op_inputs(row).get(tables.OP_INPUT_DIMS) or []
    return [d for d in got if isinstance(d, list)] if isinstance(got, list) else []


def _reads(rank: RankTrace, row: int, source: list[int] | None) -> bool:
    """Every tensor input of the op is `source` (the histogram's input; None: none allowed), a scalar
    or one-dimensional."""
    return all(len(d) <= 1 or (source is not None and d == source) for d in _dims(rank, row))


def _calibrator(rank: RankTrace, seq: np.ndarray, at: int, names: np.ndarray) -> np.ndarray:
    """The op rows of the calibrator whose histogram is seq[at]: the BEFORE ops reading its input,
    scalars or 1-D tensors right before it, the AFTER ops on scalars and 1-D tensors right after it."""
    dims = _dims(rank, int(seq[at]))
    source = dims[0] if dims and len(dims[0]) > 1 else None
    lo = at
    while lo > 0 and names[seq[lo - 1]] in BEFORE and _reads(rank, int(seq[lo - 1]), source):
        lo -= 1
    hi = at + 1
    while hi < len(seq) and names[seq[hi]] in AFTER and _reads(rank, int(seq[hi]), None):
        hi += 1
    return seq[lo:hi]


def find_calibration(rank: RankTrace, seqs: tuple[StepOps, ...], top: TopLevel) -> Calibration:
    """CALIBRATION_COLUMNS per step and thread with at least MIN_CALIBRATORS calibrators in a step that
    also runs a QUANTIZED op, and the calibrators' runtime calls."""
    rt, ops = rank.runtime, rank.ops
    none = Calibration(empty(), np.zeros(len(rt), dtype=bool))
    if not len(rt) or not len(ops) or not seqs:
        return none
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    if not np.isin(names, list(HISTOGRAMS)).any() or not np.isin(names, list(QUANTIZED)).any():
        return none
    start, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    quantized = np.isin(names, list(QUANTIZED))
    in_calib = np.zeros(len(ops), dtype=bool)
    found: list[tuple[dict[str, object], list[np.ndarray]]] = []
    for step in seqs:
        if not quantized[step.rows].any():
            continue
        for _, seq in step.threads:
            at = np.flatnonzero(np.isin(names[seq], list(HISTOGRAMS)))
            if len(at) < MIN_CALIBRATORS:
                continue
            calibrators = [_calibrator(rank, seq, int(i), names) for i in at]
            for c in calibrators:
                in_calib[c] = True
            words = pd.Series([" → ".join(str(names[r]).removeprefix("aten::") for r in c) for c in calibrators])
            found.append(({CB_STEP: step.step, CB_CALIBRATORS: len(calibrators),
                           CB_OPS: str(words.value_counts().index[0])[:OPS_CHARS],
                           CB_HOST_US: float(sum(end[c[-1]] - start[c[0]] for c in calibrators))}, calibrators))
    if not found:
        return none
    calls = (top.rt_top >= 0) & in_calib[np.maximum(top.rt_top, 0)]
    gpu_dur = rank.gpu[tables.GPU_DUR].to_numpy(dtype=float)
    rows = []
    for row, calibrators in found:
        mine = np.zeros(len(ops), dtype=bool)
        for c in calibrators:
            mine[c] = True
        call = (top.rt_top >= 0) & mine[np.maximum(top.rt_top, 0)]
        row[CB_CALLS] = int(call.sum())
        row[CB_SYNCS] = int(top.syncs[np.flatnonzero(mine)].sum())
        row[CB_GPU_US] = float(gpu_dur[(top.gpu_top >= 0) & mine[np.maximum(top.gpu_top, 0)]].sum())
        rows.append(row)
    return Calibration(pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS)), calls)
