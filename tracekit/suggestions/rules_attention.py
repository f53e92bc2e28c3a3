"""Rules about fused attention calls: is_causal=True instead of a square attention mask (and the mask built every step)."""

from __future__ import annotations

import math

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import attention_mask as am
from tracekit.analyzers.detectors import mask_build as mb
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import FUSED_ATTENTION_EFF, MATMUL_DTYPES
from tracekit.units import plural

CAUSAL_SHARE = 0.5  # the tiles above the diagonal: what a causal kernel skips
CAUSAL_MIN_PCT = 2.0  # silent below this share of the step
KIND_CALL, KIND_BUILD = "masked SDPA calls", "mask build"  # the evidence rows' kinds


def causal_mask(analysis: Analysis) -> Suggestion | None:
    """SDPA with a square mask and is_causal False: fused backends, half the attention kernel time;
    the math backend, its kernel time − a causal fused kernel's (half the FLOPs at FUSED_ATTENTION_EFF
    of the dtype's tensor peak). A mask the steps build (patterns.mask_builds) adds what building it
    costs: its host time (less the copy and sync calls' wait on the device) and its copy or kernels."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows, total, certain, modes = [], 0.0, True, set()
    for r, table in rank_tables(analysis, "masked_attention"):
        for row in table.to_dict("records"):
            backend = str(row[am.MA_BACKEND])
            if backend in am.FUSED_BACKENDS:
                time_us = float(row[am.MA_ATTN_US])
                saving = CAUSAL_SHARE * time_us
                modes.add(f"{backend}: {CAUSAL_SHARE:g} × the attention kernels' time")
            else:
                time_us = float(row[am.MA_TIME_US])
                dtype = str(row[am.MA_DTYPE])
                peak = device.peak_flops(dtype) if device is not None and dtype in MATMUL_DTYPES else None
                est = am.flash_estimate_us(float(row[am.MA_FLOPS]), peak, FUSED_ATTENTION_EFF)
                if math.isnan(est):
                    saving = CAUSAL_SHARE * time_us
                    modes.add(f"math: {CAUSAL_SHARE:g} × its kernels' time (no tensor peak for {dtype})")
                else:
                    saving = time_us - est
                    modes.add(f"math: its kernels' time − FLOPs / 2 / ({100 * FUSED_ATTENTION_EFF:.0f} % of the "
                              "dtype's tensor peak), a causal fused kernel")
            if saving <= 0:
                continue
            total += saving
            certain &= bool(row[am.MA_TRIANGLE])
            rows.append({"rank": r.rank, "kind": KIND_CALL, "op": row[am.MA_OP], "shapes": row[am.MA_SHAPES], "mask": row[am.MA_MASK],
                         "dtype": row[am.MA_DTYPE], "backend": backend,
                         "causal": "built by aten::tril/triu in the step" if row[am.MA_TRIANGLE]
                         else "if the mask is causal",
                         "calls_per_step": float(row[am.MA_CALLS]) / scope.steps,
                         "kernel_us_per_step": time_us / scope.steps,
                         "copy_bytes_per_step": 0.0, "saving_us_per_step": saving / scope.steps, "saving_us": saving})
    built = _builds(analysis, scope)
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    kernel_saving = total / scope.ranks
    total += sum(float(str(x["saving_us"])) for x in built)
    rows.extend(built)
    saving = total / scope.ranks
    formula = (f"Σ over {plural(len(rows) - len(built), 'masked call signature')} of " + "; ".join(sorted(modes))
               + f" = {fmt_us(kernel_saving)} ({fmt_us(kernel_saving / scope.steps)} per step)")
    if built:
        build = saving - kernel_saving
        formula += (f"; + {plural(len(built), 'mask build')} in the steps (their host time less the copy and sync "
                    f"calls' wait on the device, + their copies and kernels): {fmt_us(build)} "
                    f"({fmt_us(build / scope.steps)} per step); total {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    calls = sum(float(str(x["calls_per_step"])) for x in rows if x["kind"] == KIND_CALL) / scope.ranks
    backends = ", ".join(sorted({str(x["backend"]) for x in rows if x["kind"] == KIND_CALL}))
    title = (f"Pass is_causal=True instead of a square attn_mask: {plural(calls, 'SDPA call')} per step "
             f"({backends} backend) run every tile"
             + ("" if certain else " (if the mask is causal; a sliding-window or block mask: FlexAttention skips "
                                   "its masked tiles)"))
    if any(x["backend"] == am.MATH for x in rows):
        title += "; the mask also keeps flash out (math backend ran)"
    if built:
        where = "on the host and copied" if any(float(str(x["copy_bytes_per_step"])) > 0 for x in built) else "on the device"
        per_step = sum(float(str(x["saving_us_per_step"])) for x in built) / scope.ranks
        title += f"; the mask is built every step ({where}: {fmt_us(per_step)} per step)"
    return suggestion("causal_mask", title, saving, scope, formula, rows, min_pct=CAUSAL_MIN_PCT)


def _builds(analysis: Analysis, scope: Scope) -> list[dict[str, object]]:
    """Evidence rows of the masks built in the headline steps (patterns.mask_builds), one per rank and ops."""
    out: dict[tuple[int, str, int], dict[str, object]] = {}
    for r, table in rank_tables(analysis, "mask_builds"):
        if not len(table):
            continue
        for row in table[in_headline(r, table[mb.MB_STEP].to_numpy())].to_dict("records"):
            side = int(row[mb.MB_SIDE])
            x = out.setdefault((r.rank, str(row[mb.MB_OPS]), side), {
                "rank": r.rank, "kind": KIND_BUILD, "op": row[mb.MB_OPS], "shapes": None, "mask": f"[{side}, {side}]",
                "dtype": None, "backend": None, "causal": "built by aten::tril/triu in the step", "calls_per_step": 0.0,
                "kernel_us_per_step": 0.0, "copy_bytes_per_step": 0.0, "saving_us_per_step": 0.0, "saving_us": 0.0})
            host, gpu = float(row[mb.MB_HOST_US]), float(row[mb.MB_GPU_US])
            x["calls_per_step"] = float(str(x["calls_per_step"])) + 1 / scope.steps
            x["kernel_us_per_step"] = float(str(x["kernel_us_per_step"])) + gpu / scope.steps
            x["copy_bytes_per_step"] = float(str(x["copy_bytes_per_step"])) + float(row[mb.MB_COPY_BYTES]) / scope.steps
            x["saving_us_per_step"] = float(str(x["saving_us_per_step"])) + (host + gpu) / scope.steps
            x["saving_us"] = float(str(x["saving_us"])) + host + gpu
    return list(out.values())
