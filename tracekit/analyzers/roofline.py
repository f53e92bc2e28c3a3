"""Roofline: kernel rows (name + op + shapes + dtype) with intensity, achieved rates and bound.

The ceiling of a row is the device's dense peak for the row's precision: GEMM, attention and conv
kernels use the tensor-core roof of their dtype (fp32 ones the TF32 roof only when the kernel
name says tf32/xf32, else the fp32 roof, and `roof_source` says "assumed" when the name gives no
hint); every other kernel uses the fp32 (vector) roof. Memory ceiling: the device's bandwidth."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import format_shapes
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import MATMUL_CLASSES, KernelClassification
from tracekit.jsonsafe import records
from tracekit.trace import tables
from tracekit.trace.model import RankTrace
from tracekit.units import fmt_time

if TYPE_CHECKING:
    from tracekit.analyzers.step_plan import StepPlan

# --- columns of Roofline.table ------------------------------------------------------------------
NAME = "name"
CLASS = "class"
LIBRARY = "library"
OP = "op"
SHAPES = "shapes"
DTYPE = "dtype"
COUNT = "count"
TIME_US = "time_us"  # total over `count` calls
FLOPS = "flops"  # total; NaN if any call's FLOPs are unknown
BYTES = "bytes"  # total; NaN if any call's bytes are unknown
INTENSITY = "intensity"  # FLOP per byte
ACHIEVED_TFLOPS = "achieved_tflops"
ACHIEVED_GBPS = "achieved_gbps"
BOUND = "bound"  # "memory" | "compute" | None
ROOFLINE_PCT = "roofline_pct"  # achieved FLOP/s / min(peak, intensity x bandwidth), in %
MEMORY_PCT = "memory_pct"  # achieved GB/s / device bandwidth, in %
ROOF = "roof"  # precision whose peak is the ceiling ("bf16", "tf32", "fp32", ...)
ROOF_SOURCE = "roof_source"  # "kernel-name" | "dtype" | "assumed"
PEAK_TFLOPS = "peak_tflops"  # that ceiling
ESTIMATED = "estimated"  # True: FLOPs/bytes estimated from the kernels' names and grids (costs.estimates)
COLUMNS = (NAME, CLASS, LIBRARY, OP, SHAPES, DTYPE, COUNT, TIME_US, FLOPS, BYTES, INTENSITY,
           ACHIEVED_TFLOPS, ACHIEVED_GBPS, BOUND, ROOFLINE_PCT, MEMORY_PCT, ROOF, ROOF_SOURCE,
           PEAK_TFLOPS, ESTIMATED)

MEMORY, COMPUTE = "memory", "compute"
FROM_NAME, FROM_DTYPE, ASSUMED = "kernel-name", "dtype", "assumed"

# Precision a matrix kernel computes in, read from its name (first match wins). cuBLAS/cuDNN
# xmma names spell types (f32f32_tf32f32, bf16bf16); nvjet names carry A/compute/C letters
# (tst = bf16 in, fp32 compute; hsh = fp16) and a `tf32` tag; SIMT fp32 GEMMs say sgemm or ffma;
# ROCm Tensile/hipBLASLt names (Cijk_...) carry input/output/compute letters (BBS = bf16, HHS = fp16).
KERNEL_PRECISION: tuple[tuple[str, str], ...] = (
    (r"tf32|xf32|s1688gemm|s16816gemm|tensorop_s\d", "tf32"),
    # Blackwell block-scaled GEMMs. trtllm-gen names are bmm_<C>_<A><B>_<accumulator>: the first type
    # is the output (TraceLens B200 vLLM: the MoE's second GEMM, bmm_Bfloat16_MxE2m1MxE4m3_*, writes
    # the bf16 [5472, 3072] buffer its op allocates), the next two the inputs. fp4 x fp4 runs at
    # the fp4 rate, mixed fp8 x fp4 (MxE2m1 weights, MxE4m3 activations) at the fp8 rate.
    (r"^bmm_[A-Za-z0-9]+_(?:Mx)?E2m1(?:Mx)?E2m1_|nvfp4|mxf4nvf4|_e2m1e2m1", "fp4"),
    (r"^bmm_[A-Za-z0-9]+_(?:Mx)?E[245]m\d(?:Mx)?E[245]m\d_", "fp8"),
    (r"^bmm_[A-Za-z0-9]+_Bfloat16Bfloat16_", "bf16"),
    (r"e4m3|E4m3|e5m2|fp8|f8f8", "fp8"),
    (r"bf16|bfloat16|BFloat16|nvjet_(?:sm\d+_)?t[a-z]t_|^Cijk_\w+?_BBS_", "bf16"),
    (r"f16f16|fp16|c10::Half|__half|nvjet_(?:sm\d+_)?h[a-z]h_|_h\d{3,5}gemm|hgemm|^Cijk_\w+?_HHS_",
     "fp16"),
    (r"dgemm|f64f64|\bdouble\b", "fp64"),
    (r"sgemm|ffma|f32f32_f32f32|gemv[^<]{0,256}<[^>]{0,256}float, float|scudnn", "fp32"),  # CUDA-core fp32
)
_KERNEL_PRECISION = tuple((re.compile(p), v) for p, v in KERNEL_PRECISION)

# When a device lacks a precision's units, the next one down the list is its ceiling.
FALLBACK = {"fp4": "fp8", "fp8": "fp16", "bf16": "fp32", "fp16": "fp32", "tf32": "fp32", "fp32_matrix": "fp32",
            "int8": "fp16"}
HOST_TRANSFER = re.compile(r"Memcpy (?:HtoD|DtoH|HtoH|PtoP)|^(?=.*Memcpy)(?=.*Host)|Pageable|Pinned")


@dataclass(frozen=True)
class Roofline:
    """Kernel rows of one rank placed on the device's roofline."""

    rank: int
    device: Device | None
    device_name: str | None  # as the trace names it
    table: pd.DataFrame  # COLUMNS; one row per (name, op, shapes, dtype), by time_us descending
    notes: tuple[str, ...]  # what was assumed or missing, one sentence each

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "device_name": self.device_name,
            "device": self.device.to_dict() if self.device else None,
            "notes": list(self.notes),
            "kernels": kernel_records(self.table, COLUMNS, {SHAPES: format_shapes}),
        }


def flagged(rows: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """`columns`, and ESTIMATED where `rows` carry it (JSON rows show it only where true)."""
    return [*columns, ESTIMATED] if ESTIMATED in rows else list(columns)


def kernel_records(rows: pd.DataFrame, columns: Sequence[str], text: dict[str, Any]) -> list[dict[str, Any]]:
    """Kernel rows as JSON (jsonsafe.records): `estimated: true` on rows whose FLOPs/bytes are
    estimates, no such key on the others."""
    out = records(rows[flagged(rows, [c for c in columns if c != ESTIMATED])], text)
    for row in out:
        if not row.pop(ESTIMATED, False):
            continue
        row[ESTIMATED] = True
    return out


def roofline(rank: RankTrace, classification: KernelClassification | None, costs: attribution.KernelCosts,
             device: Device | None, plan: StepPlan | None = None) -> Roofline:
    """Group `rank`'s GPU rows by (kernel name, op, shapes, dtype), sum time/FLOPs/bytes, and place
    each group under the device's ceilings. device None: rates without bound or roofline_pct.
    `plan` keeps only the headline steps' activities (None: every GPU row)."""
    rows = plan.gpu_rows if plan is not None else None
    gpu = rank.gpu
    table = classification.table if classification is not None else None
    n = len(gpu)
    none = np.full(n, None, dtype=object)
    index = pd.RangeIndex(n)
    frame = pd.DataFrame({
        **{col: _objects(values, index) for col, values in (
            (NAME, gpu[tables.GPU_NAME].to_numpy(dtype=object)),
            (CLASS, table["class"].to_numpy(dtype=object) if table is not None else none),
            (LIBRARY, table["library"].to_numpy(dtype=object) if table is not None else none),
            (OP, costs.table[attribution.OP].to_numpy(dtype=object)),
            (SHAPES, costs.table[attribution.SHAPES].to_numpy(dtype=object)),
            (DTYPE, costs.table[attribution.DTYPE].to_numpy(dtype=object)))},
        TIME_US: gpu[tables.GPU_DUR].to_numpy(dtype=float),
        FLOPS: costs.table[attribution.FLOPS].to_numpy(dtype=float),
        BYTES: costs.table[attribution.BYTES].to_numpy(dtype=float),
    })
    if costs.estimated:  # (the column only where some cost is an estimate: no cost on the others)
        frame[ESTIMATED] = costs.table[attribution.SOURCE].to_numpy(dtype=object) == attribution.SOURCE_ESTIMATE
    if rows is not None:
        frame = frame[rows].reset_index(drop=True)
    table = roofline_rows(group_rows(frame), device)
    if ESTIMATED not in table:
        table[ESTIMATED] = False
    notes = _notes(table, device, rank.meta.device_name, cuda=rank.meta.platform == "cuda") + _coverage_notes(costs)
    return Roofline(rank=rank.rank, device=device, device_name=rank.meta.device_name,
                    table=table, notes=notes)


_NONE = "\u2400none\u2400"  # stands for None in group keys (groupby drops or mangles None)


def group_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (name, op, shapes, dtype): count, summed time/FLOPs/bytes (NaN if any unknown)."""
    keys = [NAME, OP, SHAPES, DTYPE]
    if not len(frame):
        return pd.DataFrame(columns=[*keys, CLASS, LIBRARY, COUNT, TIME_US, FLOPS, BYTES])
    unknown = {f"{_NONE}{c}": frame[c].isna() for c in (FLOPS, BYTES)}  # per group: any unknown (one groupby)
    filled = frame.assign(**{k: frame[k].fillna(_NONE) for k in keys}, **unknown)
    g = filled.groupby(keys, sort=False)
    extra = {ESTIMATED: (ESTIMATED, "any")} if ESTIMATED in frame else {}
    out = g.agg(**{CLASS: (CLASS, "first"), LIBRARY: (LIBRARY, "first"), COUNT: (TIME_US, "size"),
                   TIME_US: (TIME_US, "sum"), FLOPS: (FLOPS, "sum"), BYTES: (BYTES, "sum"), **extra},
                **{u: (u, "any") for u in unknown})
    for c in (FLOPS, BYTES):
        out[c] = out[c].where(~out.pop(f"{_NONE}{c}"))
    out = out.reset_index()
    for k in keys:
        out[k] = _objects((None if v == _NONE else v for v in out[k]), out.index)
    return out.sort_values(TIME_US, ascending=False, kind="stable").reset_index(drop=True)


def _objects(values: Iterable[object], index: pd.Index) -> pd.Series:
    """An object column (None stays None; pandas 3 would turn a str column's None into NaN)."""
    return pd.Series(list(values), index=index, dtype=object)


def roofline_rows(rows: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """Add the roofline columns to rows that have NAME, CLASS, DTYPE, TIME_US, FLOPS and BYTES
    (totals); same index. Usable on any grouping of kernel rows."""
    out = rows.copy()
    secs = out[TIME_US].to_numpy(dtype=float) * 1e-6
    flops = out[FLOPS].to_numpy(dtype=float)
    nbytes = out[BYTES].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[INTENSITY] = np.where(nbytes > 0, flops / nbytes, np.nan)
        out[ACHIEVED_TFLOPS] = np.where(secs > 0, flops / secs / 1e12, np.nan)
        out[ACHIEVED_GBPS] = np.where(secs > 0, nbytes / secs / 1e9, np.nan)
    roofs = [roof_for(c, d, nm, device) for c, d, nm in
             zip(out[CLASS], out[DTYPE], out[NAME].fillna(""), strict=True)]
    out[ROOF] = _objects((r[0] for r in roofs), out.index)
    out[ROOF_SOURCE] = _objects((r[1] for r in roofs), out.index)
    peaks = np.array([(device.peak_flops(r[0]) or np.nan) if device and r[0] else np.nan
                      for r in roofs], dtype=float)
    out[PEAK_TFLOPS] = peaks / 1e12
    bound = np.full(len(out), None, dtype=object)
    pct = np.full(len(out), np.nan)
    mem_pct = np.full(len(out), np.nan)
    if device is not None:
        bw = device.memory_bandwidth
        host = out[NAME].fillna("").str.contains(HOST_TRANSFER).to_numpy()
        achieved_bw = out[ACHIEVED_GBPS].to_numpy(dtype=float) * 1e9
        mem_pct = np.where(host, np.nan, achieved_bw / bw * 100)
        intensity = out[INTENSITY].to_numpy(dtype=float)
        known = ~np.isnan(intensity) & ~host & ~np.isnan(peaks)
        ridge = peaks / bw
        compute = known & (intensity >= ridge)
        bound[known] = np.where(compute[known], COMPUTE, MEMORY)
        achieved = out[ACHIEVED_TFLOPS].to_numpy(dtype=float) * 1e12
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(compute, achieved / peaks * 100, np.where(known, mem_pct, np.nan))
        zero = ~host & (flops == 0) & (nbytes > 0)  # copies, fills: on the memory roof
        bound[zero] = MEMORY
        pct = np.where(zero, mem_pct, pct)
    out[BOUND] = pd.Series(bound, index=out.index, dtype=object)
    out[ROOFLINE_PCT] = pct
    out[MEMORY_PCT] = mem_pct
    return out[[c for c in COLUMNS if c in out.columns]]


def roof_for(cls: str | None, dtype: str | None, kernel: str, device: Device | None) -> tuple[str | None, str]:
    """(precision of the ceiling, where it came from) for one kernel row."""
    hint = kernel_precision(kernel) if kernel else None
    precision: str | None
    if cls in MATMUL_CLASSES:
        if dtype in ("fp32", "tf32", None):
            if hint in ("tf32", "fp32") or (dtype is None and hint is not None):
                precision, source = hint, FROM_NAME
            elif device is not None and device.peak_flops("tf32") is None:
                precision, source = "fp32", FROM_DTYPE  # no TF32 units: nothing to assume
            else:
                precision, source = "fp32", ASSUMED  # no TF32 hint in the name: TF32 assumed off
        elif dtype in ("bf16", "fp16", "fp8", "fp4", "fp64", "int8"):
            precision, source = dtype, (FROM_NAME if hint == dtype else FROM_DTYPE)
        else:
            precision, source = "fp32", ASSUMED
        if precision == "fp32" and device is not None and "fp32_matrix" in device.peak_tflops:
            precision = "fp32_matrix"
    else:
        precision, source = ("fp64", FROM_DTYPE) if dtype == "fp64" else ("fp32", FROM_DTYPE)
    if device is not None:
        while precision is not None and device.peak_flops(precision) is None:
            precision, source = FALLBACK.get(precision), ASSUMED
    return precision, source


@lru_cache(maxsize=8192)
def kernel_precision(name: str) -> str | None:
    """The precision a matrix kernel's name spells (KERNEL_PRECISION), or None."""
    for pattern, precision in _KERNEL_PRECISION:
        if pattern.search(name):
            return precision
    return None


def _coverage_notes(costs: attribution.KernelCosts) -> tuple[str, ...]:
    """Where FLOPs/bytes are missing for a reason the user can act on or should know."""
    notes = []
    total = costs.total_us
    if total and costs.unshaped_us / total >= 0.01:
        notes.append(f"{costs.unshaped_us / total:.0%} of GPU time ran under ops recorded without "
                     "shapes: record with record_shapes=True to get FLOPs and bytes")
    guessed = [(name, us) for name, us in costs.estimated if total and us / total >= 0.01]
    if guessed:
        listed = ", ".join(f"{name} ({us / total:.0%} of GPU time)" for name, us in guessed[:3])
        notes.append(f"FLOPs/bytes of {listed} are estimates (marked ~): the op does not record the counts, "
                     "its kernels' names and launch grids give them (docs/model.md, estimated costs)")
    big = [(name, us) for name, us in costs.unmodeled if total and us / total >= 0.05]
    if big:
        listed = ", ".join(f"{name} ({us / total:.0%} of GPU time)" for name, us in big[:3])
        notes.append(f"FLOPs/bytes unknown for {listed}: no model for the op, or its recorded "
                     "arguments lack what the model needs (e.g. Concrete Inputs)")
    return tuple(notes)


def _notes(rows: pd.DataFrame, device: Device | None, device_name: str | None, *, cuda: bool = True) -> tuple[str, ...]:
    """Notes on the roofline's ceilings; `cuda`: an NVIDIA trace (TF32 is named only there)."""
    notes = []
    if device is None:
        if device_name:
            notes.append(f"The GPU \"{device_name}\" is not in tracekit's device table, so there are no "
                         "peak FLOP/s or bandwidth to compare with: no roofline ceilings or % of roof.")
        else:
            notes.append("The trace does not name its GPU, so there are no peak FLOP/s or bandwidth to "
                         "compare with: no roofline ceilings or % of roof.")
        return tuple(notes)
    assumed = rows[(rows[ROOF_SOURCE] == ASSUMED) & rows[CLASS].isin(MATMUL_CLASSES)
                   & rows[FLOPS].notna()]
    if len(assumed):
        roofs = ", ".join(sorted({str(r) for r in assumed[ROOF]}))
        n = len(assumed)
        rows_text = "1 matrix kernel row" if n == 1 else f"{n} matrix kernel rows"
        notes.append(f"{rows_text} ({fmt_time(assumed[TIME_US].sum())}) do{'es' if n == 1 else ''} not say "
                     f"which precision {'it uses' if n == 1 else 'they use'}: compared with the {roofs} peak"
                     + (" (for fp32 matrix multiplies, that is TF32 off)." if cuda else "."))
    return tuple(notes)
