"""Rules about precision and memory format: TF32 / bf16 autocast for fp32 GEMMs, convolutions and norms, and channels_last for NCHW convolutions."""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import sdpa_fallback as sf
from tracekit.analyzers.detectors.attention_mask import MATH
from tracekit.analyzers.detectors.layers import LAYOUT_TRANSPOSE
from tracekit.analyzers.kernels import ATTENTION, CONV, ELEMENTWISE, GEMM, NORMALIZATION, REDUCTION
from tracekit.analyzers.names import matches
from tracekit.analyzers.roofline import ASSUMED
from tracekit.suggestions.common import Scope, fmt_us, rank_tables, suggestion
from tracekit.suggestions.layout_sums import nhwc_sum_factor
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import FUSED_ATTENTION_EFF
from tracekit.units import plural

# bf16 autocast keeps a conv net's activations in bf16: the memory-bound kernels that read and write
# them (ReLU, residual adds, memory-bound convolutions) move half the bytes; at the bandwidth they
# reach now that halves their time (H200, train_conv.py fp32 → --bf16: 4-D elementwise 1.21 → 0.66 ms
# per step, TF32 convolutions 4.41 → 2.29 ms, the 2× of the bf16 over the TF32 roof). Elementwise
# kernels count only on 4-D tensors (activations) and outside the optimizer. BatchNorm is not counted:
# on bf16 input torch 2.11 runs its native kernels instead of cuDNN's, no faster (the same pair:
# 4.22 → 5.77 ms per step in NCHW, 1.41 → 1.66 ms in channels_last).
HALF_BYTES = 0.5
# channels_last: NHWC BatchNorm kernels move their bytes at this share of the HBM bandwidth (H200,
# train_conv.py --channels-last: cuDNN's batchnorm_{fw,bw}tr_nhwc_semiPersist kernels, 5.09 GB per
# step in 1.41 ms = 3618 GB/s = 75 % of 4800; the NCHW ones of the fp32 run: 4.22 ms, 25 %).
NHWC_NORM_SHARE = 0.75
# torch's own BatchNorm kernels (bf16 input under autocast) in channels_last reach less: the same
# script with --fast: batch_norm_*_channels_last kernels, 2.54 GB per step in 1.66 ms = 1530 GB/s = 32 %.
NATIVE_NHWC_NORM_SHARE = 0.32
NATIVE_NORM = re.compile(r"at::native")
BATCH_NORM_OP = re.compile(r"batch_norm")
NHWC_NAME = re.compile(r"nhwc|channels_last", re.IGNORECASE)
OPTIMIZER_OPS = re.compile(r"_foreach_|_fused_(adam|sgd|adagrad)|Optimizer\.")
FP64 = "fp64"
ABOVE_PEAK = 1.05  # a "fp32" kernel faster than this × the fp32 peak already runs on tensor cores (TF32)


def _fast_precision(analysis: Analysis) -> str | None:
    device = analysis.device
    if device is None:
        return None
    return "bf16" if device.peak_flops("bf16") else ("fp16" if device.peak_flops("fp16") else None)


def _activation(row: dict[str, Any]) -> bool:
    shapes = row.get("shapes")
    first = shapes[0] if isinstance(shapes, tuple) and shapes else None
    return isinstance(first, tuple) and len(first) == 4 and not OPTIMIZER_OPS.search(str(row.get("op") or ""))


def _sdpa_on_fp32(row: dict[str, Any]) -> bool:
    """An fp32 attention kernel row of torch's own SDPA (an aten op: autocast does not reach a custom
    kernel) on the fp32 roof."""
    return str(row.get("op") or "").startswith("aten::") and _cuda_core_fp32(row)


def _cuda_core_fp32(row: dict[str, Any]) -> bool:
    """An fp32 matmul-class kernel row that runs on the fp32 roof (not faster than ABOVE_PEAK × its peak:
    a faster one already uses tensor cores, or quantized inputs its dtype does not show)."""
    slow = (row.get("peak_tflops") or 0.0) * 1e12
    achieved = row.get("achieved_tflops")
    return (row.get("roof") in ("fp32", "fp32_matrix") and slow > 0 and isinstance(achieved, (int, float))
            and 0 < achieved * 1e12 <= slow * ABOVE_PEAK)


def _new_time(row: dict[str, Any], analysis: Analysis, fast: str, autocast: bool) -> tuple[float, str] | None:
    """(time at the lower precision, the model's name) for one fp32 kernel row, None when it does not
    apply. `autocast`: the suggestion is bf16 autocast (a conv net or fp32 fused attention), so
    CUDA-core fp32 GEMMs go to the `fast` roof and fp32 attention kernels to a fused one at it;
    otherwise the GEMMs go to TF32 (the change the GEMM-only title names first)."""
    device = analysis.device
    assert device is not None
    cls, t = row["class"], float(row["time_us"])
    nbytes = float(row["bytes"]) if isinstance(row.get("bytes"), (int, float)) else math.nan
    full = nbytes / device.memory_bandwidth * 1e6 if not math.isnan(nbytes) else 0.0
    if row.get("dtype") == FP64:
        return _from_fp64(row, analysis, t, full)
    if cls in (GEMM, CONV) and row.get("bound") == "compute":
        slow = (row.get("peak_tflops") or 0.0) * 1e12
        achieved = float(row["achieved_tflops"]) * 1e12
        tf32, rate = device.peak_flops("tf32"), device.peak_flops(fast)
        if slow <= 0 or not achieved > 0:
            return None
        on_fp32 = row.get("roof") in ("fp32", "fp32_matrix") and achieved <= slow * ABOVE_PEAK
        # cuDNN runs fp32 convolutions on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32):
        # a conv kernel whose name gives no precision is taken as TF32, not as CUDA-core fp32
        tf32_conv = cls == CONV and (not on_fp32 or row.get("roof_source") == ASSUMED)
        if tf32_conv and tf32 and rate:  # TF32 tensor cores: the bf16 roof is 2× the TF32 one
            return max(t * tf32 / rate, full * HALF_BYTES), f"TF32 → {fast} roof"
        if on_fp32 and autocast and rate and cls == GEMM:  # bf16 tensor cores at the same efficiency, half the bytes
            return max(row["flops"] / (rate * achieved / slow) * 1e6, full * HALF_BYTES), f"fp32 → {fast} roof"
        if on_fp32 and tf32:  # CUDA-core fp32: TF32 at the same efficiency (fp32 tensors: the same bytes)
            return max(row["flops"] / (tf32 * achieved / slow) * 1e6, full), "fp32 → TF32 roof"
        return None
    if cls == ATTENTION and autocast and _sdpa_on_fp32(row) and float(row["flops"]) > 0:
        rate = device.peak_flops(fast)  # fp32 SDPA (memory-efficient, CUDA cores) → flash / cuDNN on bf16
        if rate:
            return max(float(row["flops"]) / (rate * FUSED_ATTENTION_EFF) * 1e6, full * HALF_BYTES), \
                f"fp32 attention → fused {fast} kernel"
        return None
    memory = row.get("bound") == "memory"
    if (cls == CONV and memory) or (cls == ELEMENTWISE and _activation(row)):
        return t * HALF_BYTES, f"{fast} activations: half the bytes"
    return None


def _from_fp64(row: dict[str, Any], analysis: Analysis, t: float, full: float) -> tuple[float, str] | None:
    """A float64 kernel row in fp32: a compute-bound GEMM or convolution at the TF32 roof at the
    efficiency it reached on the fp64 roof (at most 1: Hopper's fp64 tensor cores run above the table's
    fp64 peak), at least half its bytes / bandwidth; a memory-bound kernel at half its bytes (fp32
    tensors). cuDNN's float64 convolutions (dgrad_engine, wgrad_alg0_engine, implicit_convolve_dgemm)
    reach 1-9 % of the fp64 roof and their fp32 ones 9-24 % of the TF32 roof (heldout19 nowcast_unet,
    H100: conv 89.3 → 2.55 ms per step)."""
    device = analysis.device
    assert device is not None
    if row["class"] in (GEMM, CONV) and row.get("bound") == "compute":
        slow, tf32 = (row.get("peak_tflops") or 0.0) * 1e12, device.peak_flops("tf32")
        achieved = float(row["achieved_tflops"] or 0.0) * 1e12
        if slow <= 0 or not achieved > 0 or not tf32:
            return None
        return max(row["flops"] / (tf32 * min(achieved / slow, 1.0)) * 1e6, full * HALF_BYTES), "fp64 → TF32 roof"
    if row.get("bound") == "memory" and not OPTIMIZER_OPS.search(str(row.get("op") or "")):
        return t * HALF_BYTES, "fp64 → fp32 tensors: half the bytes"
    return None


def lower_precision(analysis: Analysis) -> Suggestion | None:
    """fp32 GEMMs on the fp32 roof: TF32 at the same efficiency; in a trace with fp32 convolutions,
    also the convolutions at the bf16 roof (TF32 ones: tf32 / bf16 peak of their time) and the
    memory-bound conv, BatchNorm and activation kernels at half the bytes."""
    scope = Scope.of(analysis)
    fast = _fast_precision(analysis)
    k = analysis.kernels
    if fast is None or k is None or not len(k):
        return None
    k = k[(k["time_us"] > 0) & (k["dtype"].isin(["fp32", FP64]) | ((k["class"] == CONV) & k["dtype"].isna()))]
    convs = bool((k["class"] == CONV).any())
    autocast = convs or any(_sdpa_on_fp32(r) for r in k[k["class"] == ATTENTION].to_dict("records"))
    rows, total, before, models = [], 0.0, 0.0, set()
    # the math SDPA backend's fp32 GEMMs on the score matrix: it upcasts whatever the precision (use_sdpa pads the head dim)
    scores = {row[sf.SF_SCORES] for _, t in rank_tables(analysis, "sdpa_fallback") for row in t.to_dict("records")
              if row[sf.SF_BACKEND] == MATH}
    for row in k.to_dict("records"):
        if (row["class"] != GEMM and not autocast and row["dtype"] != FP64) or (scores and row["class"] == GEMM and sf.gemm_on_scores(row["shapes"], scores)):
            continue
        got = _new_time(row, analysis, fast, autocast)
        if got is None:
            continue
        new, how = got
        t = float(row["time_us"])
        if new >= t:
            continue
        total += t - new
        before += t
        models.add(how)
        rows.append({"kernel": row["name"], "class": row["class"], "op": row["op"], "shapes": row["shapes"],
                     "count": int(row["count"]), "time_us": t, "bound": row.get("bound"),
                     "achieved_tflops": row.get("achieved_tflops"), "roofline_pct": row.get("roofline_pct"), "model": how,
                     "new_time_us": new, "saving_us": t - new})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    by_class = pd.DataFrame(rows).groupby("class")["count"].sum().to_dict()
    described = {
        "fp64 → TF32 roof": "fp64 → TF32 roof (float64 GEMMs and convolutions): FLOPs / (TF32 peak × the efficiency reached on the "
                            "fp64 roof, at most 1), at least half the bytes / bandwidth",
        "fp64 → fp32 tensors: half the bytes": "fp64 → fp32 tensors (memory-bound kernels): t × 0.5",
        "fp32 → TF32 roof": "fp32 → TF32 roof: FLOPs / (TF32 peak × the efficiency reached on the fp32 roof), "
                            "at least bytes / bandwidth",
        f"TF32 → {fast} roof": f"TF32 → {fast} roof (convolutions): t × TF32 peak / {fast} peak, at least half "
                               "the bytes / bandwidth",
        f"{fast} activations: half the bytes": f"{fast} activations (memory-bound conv, 4-D elementwise): "
                                               f"t × {HALF_BYTES:g}, half the bytes at the bandwidth reached now",
        f"fp32 → {fast} roof": f"fp32 → {fast} roof (GEMMs under autocast): FLOPs / ({fast} peak × the efficiency "
                               "reached on the fp32 roof), at least half the bytes / bandwidth",
        f"fp32 attention → fused {fast} kernel": f"fp32 attention → fused {fast} kernel: FLOPs / "
                                                 f"({100 * FUSED_ATTENTION_EFF:.0f} % of the {fast} peak), at least "
                                                 "half the bytes / bandwidth",
    }
    fp64 = sum(x["count"] for x in rows if str(x["model"]).startswith("fp64"))
    fp64_saving = sum(x["saving_us"] for x in rows if str(x["model"]).startswith("fp64"))
    which = "float64 and fp32" if fp64 and fp64 < sum(x["count"] for x in rows) else "float64" if fp64 else "fp32"
    formula = (f"Σ t − t' over {len(rows)} {which} kernel rows = {fmt_us(before / scope.ranks)} − "
               f"{fmt_us((before - total) / scope.ranks)} = {fmt_us(saving)}; t' by model: "
               + "; ".join(described[m] for m in sorted(models))
               + (f"; BatchNorm unchanged (torch's native kernels run it on {fast} input)" if convs else
                  "" if autocast else " (bf16 autocast would halve the bytes too)"))
    if fp64 and fp64_saving >= 0.5 * total:  # the title names what holds most of the saving
        title = (f"Compute in fp32 with TF32 (or bf16 autocast) instead of float64: {plural(fp64, 'float64 kernel call')} "
                 "run at the fp64 rate with twice the fp32 bytes")
    elif autocast:
        what = ", ".join(f"{n} {c}" for c, n in sorted(by_class.items(), key=lambda kv: -kv[1]))
        ran = "convolutions and activations run at TF32" if convs else "GEMMs and attention run at fp32"
        title = f"Autocast to {fast} (torch.autocast): fp32 {ran} rates and fp32 bytes ({what} calls)"
    else:
        title = (f"Enable TF32 (or bf16 autocast) for {sum(x['count'] for x in rows)} fp32 GEMM calls "
                 f"running on the fp32 roof")
    return suggestion("lower_precision", title, saving, scope, formula, rows)


def _channel_sums(k: pd.DataFrame) -> list[dict[str, Any]]:
    """Per-channel sums of 4-D activations (bias gradients) that run slower in NHWC: their time × the
    measured NHWC / NCHW factor (layout_sums.py), the extra time as a negative saving."""
    rows = []
    for r in k[(k["class"] == REDUCTION) & (k["time_us"] > 0)].to_dict("records"):
        factor = nhwc_sum_factor(r["op"], r["shapes"], r["dtype"])
        if factor is None or factor <= 1.0:
            continue
        t = float(r["time_us"])
        rows.append({"kernel": r["name"], "op": r["op"], "shapes": r["shapes"], "dtype": r["dtype"],
                     "count": int(r["count"]), "time_us": t, "change": f"per-channel sum {factor:.2f}× slower in NHWC",
                     "new_time_us": t * factor, "saving_us": t - t * factor})
    return rows


def _nchw_norms(k: pd.DataFrame, bandwidth: float) -> list[dict[str, Any]]:
    """BatchNorm rows on NCHW tensors (not named nhwc) slower than an NHWC kernel: their time at its
    share of the bandwidth (NHWC_NORM_SHARE for cuDNN's, NATIVE_NHWC_NORM_SHARE for torch's own)."""
    rows = []
    sel = k[(k["class"] == NORMALIZATION) & (k["time_us"] > 0) & k["bytes"].notna()
            & matches(k["op"].fillna("").to_numpy(dtype=object), BATCH_NORM_OP)
            & ~matches(k["name"].to_numpy(dtype=object), NHWC_NAME)]
    for r in sel.to_dict("records"):
        t = float(r["time_us"])
        share = NATIVE_NHWC_NORM_SHARE if NATIVE_NORM.search(str(r["name"])) else NHWC_NORM_SHARE
        new = float(r["bytes"]) / (share * bandwidth) * 1e6
        if new < t:
            rows.append({"kernel": r["name"], "op": r["op"], "shapes": r["shapes"], "dtype": r["dtype"],
                         "count": int(r["count"]), "time_us": t, "memory_pct": r.get("memory_pct"),
                         "change": f"NHWC BatchNorm at {100 * share:.0f} % of the bandwidth",
                         "new_time_us": new, "saving_us": t - new})
    return rows


def channels_last(analysis: Analysis) -> Suggestion | None:
    """A conv net in NCHW: cuDNN's NCHW ↔ NHWC transposes around its convolutions go (all their time),
    and its NCHW BatchNorm kernels run as NHWC ones (their bytes at NHWC_NORM_SHARE of the bandwidth)."""
    scope = Scope.of(analysis)
    k = analysis.kernels
    if k is None or not len(k) or not (k["class"] == CONV).any():
        return None
    sel = k[matches(k["name"].to_numpy(dtype=object), LAYOUT_TRANSPOSE) & (k["time_us"] > 0)]
    if not len(sel):
        return None  # no transposes: NHWC already (or kernels that take NCHW as it is)
    rows = [{"kernel": r["name"], "op": r["op"], "shapes": r["shapes"], "dtype": r["dtype"], "count": int(r["count"]),
             "time_us": float(r["time_us"]), "change": "layout transpose removed", "new_time_us": 0.0,
             "saving_us": float(r["time_us"])} for r in sel.to_dict("records")]
    transposes = sum(x["saving_us"] for x in rows)
    calls = sum(x["count"] for x in rows) / (scope.steps * scope.ranks)
    bandwidth = analysis.device.memory_bandwidth if analysis.device is not None else None
    norms = _nchw_norms(k, bandwidth) if bandwidth else []
    sums = _channel_sums(k)
    rows += norms + sums
    rows.sort(key=lambda x: -x["saving_us"])
    norm_saving = sum(x["saving_us"] for x in norms)
    sum_cost = -sum(x["saving_us"] for x in sums)
    saving = (transposes + norm_saving - sum_cost) / scope.ranks
    if saving <= 0:
        return None
    names = ", ".join(sorted({str(x["kernel"]).split("<")[0].removeprefix("void ") for x in rows
                              if x["change"] == "layout transpose removed"}))
    formula = (f"the layout transposes' time ({names}: {fmt_us(transposes / scope.ranks)}) + Σ NCHW BatchNorm "
               f"time − its bytes at {100 * NHWC_NORM_SHARE:.0f} % of the bandwidth (cuDNN's NHWC kernels; torch's "
               f"own: {100 * NATIVE_NHWC_NORM_SHARE:.0f} %) ({len(norms)} rows: "
               f"{fmt_us(norm_saving / scope.ranks)}) − the per-channel sums' extra time in NHWC (measured ratio by "
               f"channels, suggestions/layout_sums.py; {len(sums)} rows: {fmt_us(sum_cost / scope.ranks)}) = "
               f"{fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    title = (f"Use channels_last: cuDNN transposes NCHW ↔ NHWC {calls:.0f} times per step around the "
             f"convolutions ({fmt_us(transposes / scope.ranks / scope.steps)} per step)"
             + (f", and BatchNorm runs its slower NCHW kernels ({fmt_us(norm_saving / scope.ranks / scope.steps)} "
                "per step to gain)" if norms else ""))
    return suggestion("channels_last", title, saving, scope, formula, rows)
