"""Rules about work done one item at a time that one library call does at once: RNN cells stepped per time step (cudnn_rnn), one embedding lookup per table (concat_embeddings)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import embeddings, recurrent
from tracekit.suggestions.common import Scope, fmt_bytes, fmt_us, in_headline, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural

LOOP_MIN_PCT = 2.0  # silent below 2 % of the step
# A sequence: at least this many cell calls per step (time steps × layers). One decoder step of a
# seq2seq model calls each layer's cell once; there is no sequence for cuDNN to run.
MIN_CELLS = 8
# Of the GEMMs of one cell step, the recurrent ones stay one per time step in cuDNN: forward h·W_hhᵀ
# (1 of 2), and in training also its input gradient (2 of 6: the input projection, its input and
# both weight gradients run once over all time steps). Shares of the GEMM time, as the calls are.
RECURRENT_SHARE_TRAINING = 2 / 6
RECURRENT_SHARE_FORWARD = 1 / 2
# Work besides the cells in the forward loop, kernels per cell call, at which the loop is not a
# sequence nn.LSTM can take at once (a decoder feeding its output back, attention per time step).
MAX_FOREIGN_PER_CELL = 0.5
PRECISION = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16"}  # the cell input's type → peak
# Lookups of one width per step to merge: a model with a token and a position embedding has 2.
MIN_LOOKUPS = 4
# Other launches between the first and last lookup of a group, per lookup, above which the lookups are
# not one layer's tables but one table used again and again (held-out encoder_requests: 62 per lookup,
# a request's whole forward after its embedding). nn.EmbeddingBag on 2-D ids launches 2 outside its op
# (the offsets' arange, the ids' contiguous copy: 50 for 26 tables on held-out embedding_bags).
MAX_BETWEEN_PER_LOOKUP = 4


def _headline(r: RankAnalysis, table: pd.DataFrame, column: str) -> pd.DataFrame:
    return table[in_headline(r, table[column].to_numpy())] if len(table) else table


def cudnn_times(row: dict[str, Any], peak: float | None, tensor_cores: float = 1.0) -> dict[str, float]:
    """A loop's GPU time per cuDNN (µs, summed like the row): the recurrent GEMM share as it is, the
    rest of the GEMM FLOPs at the rate of the rank's largest GEMM (at most `peak` FLOP/s; unknown:
    as it is), the cell's own kernels as they are, the gradient accumulations and copies gone.
    `tensor_cores`: how much faster cuDNN runs the GEMMs than the loop did (float32 cells: cuDNN takes
    TF32 tensor cores by default, torch.backends.cudnn.allow_tf32, where the loop's cuBLAS matmuls run
    full float32: the device's TF32 / FP32 peak; `peak` is then the TF32 one): both shares ÷ it."""
    share = RECURRENT_SHARE_TRAINING if row["backward"] else RECURRENT_SHARE_FORWARD
    gemm_us, flops = float(row[recurrent.RC_GEMM_US]), float(row[recurrent.RC_GEMM_FLOPS])
    rate = float(row[recurrent.RC_REF_RATE]) * tensor_cores
    if peak:
        rate = min(rate, peak / 1e6) if not math.isnan(rate) else math.nan
    batched = (1 - share) * gemm_us / tensor_cores
    if not math.isnan(rate) and not math.isnan(flops) and rate > 0:
        batched = min(batched, (1 - share) * flops / rate)
    gemm = share * gemm_us / tensor_cores + batched
    return {"gemm_us": gemm, "cudnn_us": gemm + float(row[recurrent.RC_CELL_US]),
            "gemm_factor": gemm / gemm_us if gemm_us > 0 else 1.0, "share": share, "rate": rate}


def cudnn_rnn(analysis: Analysis) -> Suggestion | None:
    """RNN cells stepped in a Python loop: the loop's wall time (or its GPU time, if longer) − the
    GPU time cuDNN's whole-sequence call would take (cudnn_times), per step."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total = [], 0.0
    for r in analysis.ranks:
        table = r.patterns.rnn_cells if r.patterns is not None else None
        t = _headline(r, table, recurrent.RC_STEP) if table is not None else None
        if t is None or not len(t) or t[recurrent.RC_CALLS].min() < MIN_CELLS:
            continue
        if (t[recurrent.RC_FOREIGN] >= MAX_FOREIGN_PER_CELL * t[recurrent.RC_CALLS]).any():
            continue  # more than the cells runs per time step: not a sequence to hand over whole
        steps = len(t)
        # NaN stays NaN (min_count): unknown GEMM FLOPs (no recorded shapes) must not count as none
        sums = {c: float(t[c].astype(float).sum(min_count=1)) for c in (recurrent.RC_CALLS, recurrent.RC_KERNELS,
                recurrent.RC_LAUNCHES, recurrent.RC_GPU_US, recurrent.RC_GEMM_US, recurrent.RC_GEMM_FLOPS,
                recurrent.RC_CELL_US, recurrent.RC_OTHER_US, recurrent.RC_WINDOW_US)}
        first = t.iloc[0]
        dtype = str(first[recurrent.RC_DTYPE])
        precision = PRECISION.get(dtype)
        peak = device.peak_flops(precision) if device is not None and precision else None
        tf32 = device.peak_flops("tf32") if device is not None and precision == "fp32" else None
        est = cudnn_times({**sums, recurrent.RC_REF_RATE: float(first[recurrent.RC_REF_RATE]),
                           "backward": int(first[recurrent.RC_BACKWARD]) > 0},
                          tf32 or peak, tf32 / peak if tf32 and peak else 1.0)
        now = max(sums[recurrent.RC_WINDOW_US], sums[recurrent.RC_GPU_US])
        saving = max(now - est["cudnn_us"], 0.0)
        total += saving
        rows.append({"rank": r.rank, "cell": str(first[recurrent.RC_CELL]),
                     "calls_per_step": sums[recurrent.RC_CALLS] / steps, "batch": int(first[recurrent.RC_BATCH]),
                     "input_size": int(first[recurrent.RC_INPUT]), "hidden_size": int(first[recurrent.RC_HIDDEN]),
                     "dtype": dtype, "launches_per_step": sums[recurrent.RC_LAUNCHES] / steps,
                     "kernels_per_step": sums[recurrent.RC_KERNELS] / steps,
                     "window_us": sums[recurrent.RC_WINDOW_US] / steps, "gpu_us": sums[recurrent.RC_GPU_US] / steps,
                     "gemm_us": sums[recurrent.RC_GEMM_US] / steps, "cell_us": sums[recurrent.RC_CELL_US] / steps,
                     "other_us": sums[recurrent.RC_OTHER_US] / steps, "cudnn_us": est["cudnn_us"] / steps,
                     "gemm_factor": est["gemm_factor"], "windows_per_step": float(first[recurrent.RC_WINDOWS]),
                     "tf32": bool(tf32),
                     "backward": int(first[recurrent.RC_BACKWARD]) > 0,
                     "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    x: dict[str, Any] = rows[0]
    formula = (f"per step, max(the loop's wall time {fmt_us(x['window_us'])}, its kernels' GPU time "
               f"{fmt_us(x['gpu_us'])}) − cuDNN's GPU time {fmt_us(x['cudnn_us'])}: the recurrent GEMMs "
               f"({100 * (RECURRENT_SHARE_TRAINING if x['backward'] else RECURRENT_SHARE_FORWARD):.0f} % "
               "of the GEMM time) stay one per time step, the other GEMMs' FLOPs run as one GEMM over all time "
               "steps at the rate of the trace's largest GEMM, the cell kernels stay, the gradient accumulations "
               f"and copies ({fmt_us(x['other_us'])}) go"
               + ("; float32 cells: cuDNN's GEMMs on TF32 tensor cores (torch.backends.cudnn.allow_tf32, on by "
                  "default), the loop's float32 GEMM time ÷ the TF32 / FP32 peak" if x["tf32"]
                  else "")
               + f"; × {plural(round(scope.steps), 'step')} = {fmt_us(saving)}")
    title = (f"Run the sequence with nn.LSTM / nn.GRU (cuDNN) instead of stepping {x['cell'].removeprefix('aten::')} "
             f"in Python: {x['calls_per_step']:.0f} cell calls launch {x['launches_per_step']:.0f} kernels "
             f"({fmt_us(x['gpu_us'])} of GPU time) per step")
    return suggestion("cudnn_rnn", title, saving, scope, formula, rows, min_pct=LOOP_MIN_PCT)


def merged_us(row: dict[str, Any], bandwidth: float | None) -> float:
    """One merged lookup's GPU time: its bytes at `bandwidth`, at least one call's kernel sequence."""
    slot = float(row[embeddings.EL_SLOT_US])
    return max(slot, float(row[embeddings.EL_BYTES]) / bandwidth * 1e6) if bandwidth else float(row[embeddings.EL_TIME_US])


def concat_embeddings(analysis: Analysis) -> Suggestion | None:
    """Many lookups of one width per step: each group's max(CPU time of its calls, their GPU time) −
    max(the longest call's CPU time, one merged call's GPU time), forward and backward, per step."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total, bandwidth = [], 0.0, None
    for r in analysis.ranks:
        table = r.patterns.embedding_lookups if r.patterns is not None else None
        t = _headline(r, table, embeddings.EL_STEP) if table is not None else None
        if t is None or not len(t):
            continue
        peak = device.memory_bandwidth if device is not None else None
        achieved = float(t[embeddings.EL_ACHIEVED].iloc[0])
        best = min(achieved, peak) if peak and not math.isnan(achieved) else (peak or achieved)
        bandwidth = best if best and not math.isnan(best) else None
        key = [embeddings.EL_OP, embeddings.EL_DIM, embeddings.EL_DTYPE]
        fwd = t[t[embeddings.EL_DIRECTION] == embeddings.DIRECTION_FORWARD]
        fwd = fwd[fwd[embeddings.EL_BETWEEN] <= MAX_BETWEEN_PER_LOOKUP * fwd[embeddings.EL_CALLS]]
        many = fwd.groupby(key)[embeddings.EL_CALLS].min()
        for (op, dim, dtype), calls in many.items():
            if calls < MIN_LOOKUPS:
                continue
            mine = t[(t[embeddings.EL_OP] == op) & (t[embeddings.EL_DIM] == dim) & (t[embeddings.EL_DTYPE] == dtype)]
            for direction, g in mine.groupby(embeddings.EL_DIRECTION, sort=False):
                steps = len(g)
                recs = g.to_dict("records")
                merged = sum(merged_us(x, bandwidth) for x in recs)
                now_gpu, cpu = float(g[embeddings.EL_TIME_US].sum()), float(g[embeddings.EL_CPU_US].sum())
                saving = max(max(cpu, now_gpu) - max(float(g[embeddings.EL_CPU_MAX_US].sum()), merged), 0.0)
                total += saving
                rows.append({"rank": r.rank, "op": op, "direction": direction, "dim": int(dim), "dtype": dtype,
                             "tables": float(g[embeddings.EL_CALLS].sum()) / steps,
                             "rows": int(g[embeddings.EL_ROWS].iloc[0]),
                             "kernels_per_step": float(g[embeddings.EL_KERNELS].sum()) / steps,
                             "merged_kernels": int(g[embeddings.EL_SLOTS].max()),
                             "gpu_us": now_gpu / steps, "cpu_us": cpu / steps, "bytes": float(g[embeddings.EL_BYTES].sum()) / steps,
                             "merged_us": merged / steps, "gpu_factor": merged / now_gpu if now_gpu > 0 else 1.0,
                             "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    fwd_rows = [x for x in rows if x["direction"] == embeddings.DIRECTION_FORWARD] or rows
    x: dict[str, Any] = fwd_rows[0]
    gbps = f"{bandwidth / 1e9:.0f} GB/s" if bandwidth else "their time now"
    formula = (f"Σ over forward and backward of max(the calls' CPU time, their GPU time) − max(the longest call's "
               f"CPU time, one merged call: max(one call's kernel sequence, the calls' bytes at {gbps}, the best "
               f"a kernel of the trace reached)); forward: {fmt_bytes(x['bytes'])} per step → {fmt_us(x['merged_us'])} "
               f"instead of {fmt_us(x['gpu_us'])}; = {fmt_us(saving)}")
    kernels = sum(y["kernels_per_step"] for y in rows) / scope.ranks
    gpu = sum(y["gpu_us"] for y in rows) / scope.ranks
    title = (f"Concatenate the {x['tables']:.0f} embedding tables of width {x['dim']} into one (ids shifted by "
             f"each table's first row; torchrec / FBGEMM TBE): {x['tables']:.0f} lookups launch {kernels:.0f} kernels "
             f"({fmt_us(gpu)} of GPU time) per step with their backward")
    return suggestion("concat_embeddings", title, saving, scope, formula, rows, min_pct=LOOP_MIN_PCT)
