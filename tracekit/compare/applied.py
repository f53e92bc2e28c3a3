"""Whether the AFTER trace shows the change a suggestion of BEFORE asked for: one row of signals per rule id, read from the two analyses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers import kernels, step_parts
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import (
    accumulation,
    anomaly,
    attention_mask,
    cache_growth,
    cleanup,
    compiled,
    embeddings,
    ensembles,
    foreach,
    generation,
    hostside,
    launch_blocking,
    layers,
    loader_respawn,
    offload,
    optimizer,
    recompiles,
    recompute,
    recurrent,
    requests,
    samples,
    sequences,
    triton_launch,
    weight_convert,
)
from tracekit.analyzers.kernels import SUM_COUNT, SUM_KEY, SUM_TIME
from tracekit.suggestions.rules_align import misaligned_calls
from tracekit.units import fmt_us

Value = float | str | None
Measure = Callable[[Analysis], Value]

# How a signal's value must move between BEFORE and AFTER for the change to count as made.
FALLS = "falls"  # after <= (1 - amount) x before, before > 0
GROWS = "grows"  # after > 0 and after >= amount x before (appears when before is 0)
BECOMES = "becomes"  # after == target != before (a kind, a precision)
CHANGES = "changes"  # after != before, both known

# How its values are written.
COUNT, TIME, SHARE, WORD = "count", "time", "share", "word"


@dataclass(frozen=True)
class Signal:
    """One thing the trace shows about a change: what it is in words, how it is measured on an
    Analysis (None: the trace cannot tell), how it must move, and how its values are written."""

    what: str
    measure: Measure
    test: str
    amount: float = 0.0
    target: str = ""
    unit: str = COUNT

    def fired(self, before: Value, after: Value) -> bool | None:
        """Whether before → after is the move `test` names (None: a value is unknown)."""
        if before is None or after is None:
            return None
        if self.test in (BECOMES, CHANGES):
            return before != after and (self.test == CHANGES or after == self.target)
        b, a = float(before), float(after)
        if self.test == FALLS:
            return b > 0 and a <= (1.0 - self.amount) * b
        return a > 0 and a >= self.amount * b

    def expected(self) -> str:
        if self.test == FALLS:
            if self.amount >= 1:
                return "to vanish"
            return "a fall to ¼ or less" if self.amount == 0.75 else f"a fall of ≥ {100 * self.amount:.0f} %"
        if self.test == GROWS:
            return "to appear" if self.amount <= 1 else f"to appear or grow ≥ {self.amount:g}×"
        return f"to become {self.target}" if self.test == BECOMES else "to change"

    def words(self, before: Value, after: Value) -> str:
        return f"{self.what} {_fmt(before, self.unit)} → {_fmt(after, self.unit)}"


@dataclass(frozen=True)
class Applied:
    """Whether the change was made (None: tracekit has no check for it, or the traces cannot tell) and
    one short sentence with the numbers that say so ('host syncs per steady step 1.0 → 0.0')."""

    applied: bool | None
    evidence: str


def _fmt(v: Value, unit: str) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, str):
        return v
    if unit == TIME:
        return fmt_us(v)
    return f"{100 * v:.0f} %" if unit == SHARE else f"{v:.1f}"


# --- measures: per steady step (the analysis's own selection), summed over its ranks --------------

def _steps(a: Analysis) -> int:
    return max(int(a.totals.steps), 1)


def _field(name: str) -> Measure:
    return lambda a: float(getattr(a.totals, name)) / _steps(a)


def _class_count(*classes: str) -> Measure:
    def measure(a: Analysis) -> float:
        c = a.classes
        return float(c.loc[c[SUM_KEY].isin(classes), SUM_COUNT].sum()) / _steps(a)
    return measure


def _class_time(*classes: str) -> Measure:
    def measure(a: Analysis) -> float:
        c = a.classes
        return float(c.loc[c[SUM_KEY].isin(classes), SUM_TIME].sum()) / _steps(a)
    return measure


def _pattern_sum(table: str, column: str) -> Measure:
    """A column of a pattern table (they cover the selected steps only), per step."""
    def measure(a: Analysis) -> float:
        total = 0.0
        for r in a.ranks:
            t = getattr(r.patterns, table, None) if r.patterns is not None else None
            if t is not None and len(t):
                total += float(np.nansum(t[column].to_numpy(dtype=float)))
        return total / _steps(a)
    return measure


def _in_steps(a: Analysis, rank: int, table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of a per-step table that fall in the rank's selected steps."""
    r = next(x for x in a.ranks if x.rank == rank)
    return table[table[column].isin([int(s) for s in r.launch.steady_steps])]


def single_process_loads(a: Analysis) -> float:
    """Selected steps that load data with a single-process DataLoader (num_workers=0), per step."""
    n = 0
    for r in a.ranks:
        t = r.patterns.dataloader if r.patterns is not None else None
        if t is not None and len(t):
            n += int(_in_steps(a, r.rank, t, hostside.DL_STEP)[hostside.DL_SINGLE].astype(bool).sum())
    return n / _steps(a)


def _steps_sum(table: str, step: str, column: str | None = None) -> Measure:
    """Rows (or a column's sum) of a per-step pattern table in the selected steps, per step."""
    def measure(a: Analysis) -> float:
        n = 0.0
        for r in a.ranks:
            t = getattr(r.patterns, table, None) if r.patterns is not None else None
            if t is not None and len(t):
                rows = _in_steps(a, r.rank, t, step)
                n += len(rows) if column is None else float(rows[column].sum())
        return n / _steps(a)
    return measure


# torch.compile graph breaks (detectors/compiled.py) in the selected steps, per step
graph_breaks_per_step = _steps_sum("graph_breaks", compiled.GB_STEP)


def micro_batches_per_step(a: Analysis) -> float | None:
    """Forward+backward passes per optimizer step (patterns.accumulation, the mean over the selected steps
    that accumulate; 1 in a training trace without accumulation; None outside training)."""
    rows = [_in_steps(a, r.rank, r.patterns.accumulation, accumulation.AC_STEP) for r in a.ranks
            if r.patterns is not None and len(r.patterns.accumulation)]
    rows = [t for t in rows if len(t)]
    if rows:
        return float(np.mean(np.concatenate([t[accumulation.AC_MICRO_BATCHES].to_numpy(dtype=float) for t in rows])))
    return 1.0 if any(r.patterns is not None and r.patterns.training for r in a.ranks) else None


def graph_share(a: Analysis) -> float:
    """Share of the GPU activities (every step of every rank) replayed from CUDA/HIP graphs."""
    replayed = total = 0
    for r in a.ranks:
        total += len(r.classification.table)
        replayed += r.graphs.activities if r.graphs is not None else 0
    return replayed / total if total else 0.0


def _optimizer_rows(a: Analysis) -> pd.DataFrame | None:
    """The Optimizer.step ranges of the selected steps (all of them when none falls in one); None: no range."""
    tables = []
    for r in a.ranks:
        t = r.patterns.optimizer if r.patterns is not None else None
        if t is not None and len(t):
            mine = _in_steps(a, r.rank, t, optimizer.OS_STEP)
            tables.append(mine if len(mine) else t)
    return pd.concat(tables, ignore_index=True) if tables else None


def optimizer_kernels(a: Analysis) -> float | None:
    """GPU activities launched per optimizer step (mean over its ranges)."""
    rows = _optimizer_rows(a)
    return None if rows is None else float(rows[optimizer.OS_KERNELS].astype(float).mean())


def optimizer_kind(a: Analysis) -> str | None:
    """How most optimizer steps update their parameters (optimizer.PER_PARAMETER / MULTI_TENSOR_KIND / FUSED_KIND)."""
    rows = _optimizer_rows(a)
    return None if rows is None else str(rows[optimizer.OS_KIND].astype(str).mode().iloc[0])


_NAME_PRECISION = ((re.compile(r"tf32", re.I), "tf32"), (re.compile(r"e4m3|e5m2|fp8|f8f8", re.I), "fp8"),
                   (re.compile(r"bf16", re.I), "bf16"), (re.compile(r"fp16|f16f16|hgemm", re.I), "fp16"))


def gemm_precision(a: Analysis) -> str | None:
    """The precision most GEMM time runs at: from the kernel name (tf32, fp8, bf16, fp16 tags: TF32 is a
    math mode, its inputs stay float) else the op's input dtype; None without GEMM kernels."""
    k = a.kernels
    gemm = k[k["class"].astype(str) == kernels.GEMM]
    if not len(gemm):
        return None
    time: dict[str, float] = {}
    for name, dtype, us in zip(gemm["name"].astype(str), gemm["dtype"], gemm["time_us"].astype(float), strict=True):
        tag = next((p for rx, p in _NAME_PRECISION if rx.search(name)), None)
        key = tag or (str(dtype) if isinstance(dtype, str) and dtype else "unknown")
        time[key] = time.get(key, 0.0) + us
    return max(time.items(), key=lambda kv: kv[1])[0]


def triton_launch_config(a: Analysis) -> str | None:
    """The launch configuration (constexprs, warps, stages) most user Triton kernel time runs with
    (patterns.triton_launches); None without user Triton launches."""
    time: dict[str, float] = {}
    for r in a.ranks:
        t = r.patterns.triton_launches if r.patterns is not None else None
        for rec in (t.to_dict("records") if t is not None and len(t) else []):
            key = (f"{rec[triton_launch.TL_KERNEL]}: {rec[triton_launch.TL_CONSTEXPRS] or 'no constexprs'}, "
                   f"{rec[triton_launch.TL_WARPS]:g} warps, {rec[triton_launch.TL_STAGES]:g} stages")
            time[key] = time.get(key, 0.0) + float(rec[triton_launch.TL_TIME_US])
    return max(time.items(), key=lambda kv: kv[1])[0] if time else None


def layout_transpose_time(a: Analysis) -> float:
    """cuDNN NCHW <-> NHWC transpose kernel time (step_parts.layout_transposes), per step."""
    return step_parts.layout_transposes(a, step_parts.steady(a))


# --- one row per rule id: the signals that show its change was made (any one suffices) ------------

APPLIED: dict[str, tuple[Signal, ...]] = {
    # rules_launch.cuda_graphs: capture the step and replay it (torch.cuda.graphs, mode="reduce-overhead"):
    # the AFTER trace then runs its kernels from graph launches (GraphReplays of each rank).
    "cuda_graphs": (Signal("GPU activities replayed from CUDA graphs", graph_share, GROWS, 2.0, unit=SHARE),),
    # rules_host.avoid_sync: drop the per-step .item() / .cpu() / explicit syncs (LaunchTotals.syncs).
    "avoid_sync": (Signal("host syncs per steady step", _field("syncs"), FALLS, 0.25),),
    # rules_host.dataloader_workers: num_workers > 0 takes the loading off the training thread: the
    # DataLoader wait (LaunchTotals.data_wait_us) halves, or the single-process iterator is gone.
    "dataloader_workers": (
        Signal("DataLoader wait per step", _field("data_wait_us"), FALLS, 0.5, unit=TIME),
        Signal("single-process DataLoader loads per step", single_process_loads, FALLS, 1.0)),
    # rules_python.preprocess_off_thread: the preprocessing moves to workers or a thread: the GPU idle
    # while the CPU works between launches (LaunchTotals.cpu_wait_us) halves.
    "preprocess_off_thread": (Signal("GPU idle while the CPU works per step", _field("cpu_wait_us"), FALLS, 0.5,
                                     unit=TIME),),
    # rules_host.pinned_memory: pin_memory=True / non_blocking copies: pageable copy time halves.
    "pinned_memory": (Signal("pageable copy time per step", _field("pageable_copy_us"), FALLS, 0.5, unit=TIME),),
    # rules_optimizer.fused_optimizer: fused=True updates all parameters in a few kernels
    # (detectors/optimizer.py OS_KERNELS, OS_KIND): kernels per optimizer step fall 4×, or the kind is fused.
    "fused_optimizer": (Signal("kernels per optimizer step", optimizer_kernels, FALLS, 0.75),
                        Signal("optimizer update", optimizer_kind, BECOMES, target=optimizer.FUSED_KIND, unit=WORD)),
    # rules_offload.optimizer_on_gpu: the optimizer steps on the GPU's parameters: no Optimizer.step range
    # runs on the host between gradient and weight copies any more (detectors/offload.py).
    "optimizer_on_gpu": (Signal("optimizer steps run on the host per step", _steps_sum("offload", offload.OF_STEP),
                                FALLS, 1.0),),
    # rules_kernels.lower_precision: TF32 / bf16 autocast: the GEMMs run other kernels (tf32/bf16 names or
    # input dtype in Analysis.kernels), or GEMM time falls by 30 %.
    "lower_precision": (Signal("GEMM precision (by time)", gemm_precision, CHANGES, unit=WORD),
                        Signal("GEMM time per step", _class_time(kernels.GEMM), FALLS, 0.3, unit=TIME)),
    # rules_launch.batch_bmm: one batched GEMM instead of a loop: the same-shape GEMM loops
    # (patterns.loops, their kernels) vanish, or the ensemble members' stretches (patterns.ensembles) do.
    "batch_bmm": (Signal("GEMMs in same-shape loops per step", _pattern_sum("loops", sequences.LP_GEMMS), FALLS, 1.0),
                  Signal("GEMMs of ensemble members called one by one per step",
                         _pattern_sum("ensembles", ensembles.EN_GEMMS), FALLS, 1.0)),
    # rules_kernels.fuse_elementwise: torch.compile / fused ops: fewer elementwise + normalization kernels.
    "fuse_elementwise": (Signal("elementwise + normalization kernels per step",
                                _class_count(kernels.ELEMENTWISE, kernels.NORMALIZATION), FALLS, 0.3),),
    # rules_kernels.use_sdpa: F.scaled_dot_product_attention: fused attention kernels (class attention)
    # replace the unfused scores GEMM → softmax → GEMM chain (patterns.attention).
    "use_sdpa": (Signal("fused attention kernels per step", _class_count(kernels.ATTENTION), GROWS, 2.0),),
    # rules_attention.causal_mask: is_causal=True instead of a square attn_mask: the masked square SDPA
    # calls (patterns.masked_attention) vanish, or attention kernel time falls by 30 % (the skipped half).
    "causal_mask": (Signal("masked square SDPA calls per step",
                           _pattern_sum("masked_attention", attention_mask.MA_CALLS), FALLS, 1.0),
                    Signal("attention kernel time per step", _class_time(kernels.ATTENTION), FALLS, 0.3, unit=TIME)),
    # rules_compile.graph_breaks: fullgraph / tensor ops instead of .item(): the breaks between compiled
    # graphs (patterns.graph_breaks) fall by three quarters.
    "graph_breaks": (Signal("graph breaks per step", graph_breaks_per_step, FALLS, 0.75),),
    # rules_compile.recompiles: dynamic shapes or shape buckets: no frame compiles inside the steps.
    "recompiles": (Signal("frame compiles per step", _steps_sum("recompiles", recompiles.RC_STEP, recompiles.RC_FRAMES),
                          FALLS, 1.0),),
    # rules_align.align_dims: padded shapes: no GEMM call is off alignment any more (leading dims from the
    # strides, alignN / older-architecture kernel names, N or K).
    "align_dims": (Signal("GEMM calls off alignment per step", misaligned_calls, FALLS, 1.0),),
    # rules_triton.triton_config: @triton.autotune / other tiles: the user Triton kernels' time halves, or
    # the launch configuration most of their time runs with changes (a memory-bound kernel gains less).
    "triton_config": (Signal("user Triton kernel time per step", _pattern_sum("triton_launches", triton_launch.TL_TIME_US),
                             FALLS, 0.5, unit=TIME),
                      Signal("user Triton launch configuration (by time)", triton_launch_config, CHANGES, unit=WORD)),
    # rules_host.overlap_comm: bucketing / async collectives: exposed communication (LaunchTotals.comm_exposed_us) halves.
    "overlap_comm": (Signal("exposed communication per step", _field("comm_exposed_us"), FALLS, 0.5, unit=TIME),),
    # rules_precision.channels_last: the model and input in channels_last: cuDNN's layout transposes vanish.
    "channels_last": (Signal("NCHW ↔ NHWC transpose time per step", layout_transpose_time, FALLS, 1.0, unit=TIME),),
    # rules_decode.quantize_weights: int8/int4 weights: the GEMV kernels read fewer bytes, so GEMM time
    # falls by 30 % (dequantizing GEMVs compiled by Inductor are reductions, not GEMMs: they fall further).
    "quantize_weights": (Signal("GEMM time per step", _class_time(kernels.GEMM), FALLS, 0.3, unit=TIME),),
    # rules_llm.fused_llm_kernels: fused kernels launch none of the chains' aten ops: their kernels
    # (patterns.llm_chains) fall to a quarter.
    "fused_llm_kernels": (Signal("unfused LLM chain kernels per step", _pattern_sum("llm_chains", layers.LC_KERNELS),
                                 FALLS, 0.75),),
    # rules_loops.cudnn_rnn: nn.LSTM / nn.GRU over the sequence: no RNN cell call is left (patterns.rnn_cells).
    "cudnn_rnn": (Signal("RNN cell calls per step", _pattern_sum("rnn_cells", recurrent.RC_CALLS), FALLS, 1.0),),
    # rules_loops.concat_embeddings: one table: lookup calls (patterns.embedding_lookups) fall to a quarter.
    "concat_embeddings": (Signal("embedding lookup calls per step", _pattern_sum("embedding_lookups", embeddings.EL_CALLS),
                                 FALLS, 0.75),),
    # rules_cache.preallocate_kv_cache: a buffer allocated once and written in place: no torch.cat grows
    # a cache a few positions per call any more (patterns.cache_growth).
    "preallocate_kv_cache": (Signal("cache-growing torch.cat calls per step",
                                    _steps_sum("cache_growth", cache_growth.CG_STEP, cache_growth.CG_CALLS), FALLS, 1.0),),
    # rules_cache.use_kv_cache: a KV cache: no forward re-runs the growing sequence per token (patterns.generation).
    "use_kv_cache": (Signal("forwards over the whole sequence per step",
                            _steps_sum("generation", generation.GN_STEP, generation.GN_FORWARDS), FALLS, 1.0),),
    # rules_convert.convert_weights_once: no GEMM call converts its weight per call (patterns.weight_converts).
    "convert_weights_once": (Signal("GEMM calls converting their weight per step",
                                    _steps_sum("weight_converts", weight_convert.WC_STEP, weight_convert.WC_CALLS),
                                    FALLS, 1.0),),
    # rules_recompute.drop_checkpointing: no forward op is re-run in backward any more (patterns.recompute).
    "drop_checkpointing": (Signal("forward ops re-run in backward per step",
                                  _steps_sum("recompute", recompute.RC_STEP, recompute.RC_OPS), FALLS, 1.0),),
    # rules_batching.foreach_loops: torch._foreach_* ops instead of the Python loops: the per-tensor calls
    # of the loops (patterns.foreach_loops) fall to a quarter.
    "foreach_loops": (Signal("per-tensor loop calls per step", _steps_sum("foreach_loops", foreach.FL_STEP, foreach.FL_CALLS),
                             FALLS, 0.75),),
    # rules_batching.batch_requests: one forward at batch k: the steps served as repeated batch-1 forwards vanish.
    "batch_requests": (Signal("batch-1 forwards per step", _steps_sum("requests", requests.RQ_STEP, requests.RQ_REQUESTS),
                              FALLS, 1.0),),
    # rules_memory.larger_batch (gradient accumulation): fewer, larger micro-batches: the forward+backward
    # passes per optimizer step (patterns.accumulation) halve or more (the memory-only case: no check of its own).
    "larger_batch": (Signal("forward+backward passes per optimizer step", micro_batches_per_step, FALLS, 0.5),),
    # rules_batching.batch_samples: the samples padded and run once: the per-sample loops' repetitions vanish.
    "batch_samples": (Signal("per-sample loop repetitions per step",
                             _steps_sum("sample_loops", samples.SL_STEP, samples.SL_SAMPLES), FALLS, 1.0),),
    # rules_debug: anomaly detection off: the backward NaN checks vanish; no per-step empty_cache(): the
    # releases (cudaFree bursts outside ops) vanish; no per-step gc.collect(): the recorded pauses halve.
    "anomaly_mode": (Signal("anomaly NaN checks per step", _steps_sum("anomaly", anomaly.AN_STEP, anomaly.AN_CHECKS),
                            FALLS, 1.0),),
    # no synchronous launches: the kernel launch calls that return after their kernel vanish
    # rules_loader.reuse_dataloader: the loader built once: no multi-process iterator is created per step.
    "reuse_dataloader": (Signal("DataLoader iterators created per step",
                                _steps_sum("loader_respawn", loader_respawn.LR_STEP), FALLS, 1.0),),
    "launch_blocking": (Signal("kernel launches returning after their kernel per step",
                               _steps_sum("launch_blocking", launch_blocking.LB_STEP, launch_blocking.LB_BLOCKED),
                               FALLS, 1.0),),
    "empty_cache": (Signal("CUDA cache releases per step", _steps_sum("cleanup", cleanup.CL_STEP, cleanup.CL_RELEASES),
                           FALLS, 1.0),),
    "gc_collect": (Signal("garbage-collection pause per step", _steps_sum("cleanup", cleanup.CL_STEP, cleanup.CL_GC_US),
                          FALLS, 0.5, unit=TIME),),
}


def applied(suggestion_id: str, before: Analysis, after: Analysis) -> Applied:
    """Whether AFTER shows the change `suggestion_id` asks for: made when any signal of its row fired;
    not made when every signal could be read and none fired; None for an id without a row, or
    when no signal could be read."""
    signals = APPLIED.get(suggestion_id)
    if signals is None:
        return Applied(None, "tracekit has no check of whether this change was made")
    read = []
    for s in signals:
        b, a = s.measure(before), s.measure(after)
        fired = s.fired(b, a)
        if fired:
            return Applied(True, s.words(b, a))
        read.append((s, b, a, fired))
    words = "; ".join(f"{s.words(b, a)} (expected {s.expected()})" for s, b, a, _ in read)
    if all(f is None for *_, f in read):
        return Applied(None, words)
    return Applied(False, words)
