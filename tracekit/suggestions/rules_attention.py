"""Rules about fused attention calls: is_causal=True instead of a square attention mask (and the mask built every step), enable_gqa=True instead of K/V expanded to every query head, the filled prefix of a static K/V cache instead of all of it under a padding mask."""

from __future__ import annotations

import math

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import attention_mask as am
from tracekit.analyzers.detectors import gqa_expand as gq
from tracekit.analyzers.detectors import mask_build as mb
from tracekit.analyzers.detectors import static_cache as sc
from tracekit.model.outlook import Transform
from tracekit.model.whatif import compose, remove_calls, scale_rows
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import FUSED_ATTENTION_EFF, MATMUL_DTYPES
from tracekit.units import plural

CAUSAL_SHARE = 0.5  # the tiles above the diagonal: what a causal kernel skips
CAUSAL_MIN_PCT = 2.0  # silent below this share of the step
KIND_CALL, KIND_BUILD = "masked SDPA calls", "mask build"  # the evidence rows' kinds


def causal_mask(analysis: Analysis) -> Suggestion | None:
    """SDPA with a square mask and is_causal False: fused backends, the mask's read (every batch and
    head's tile at the device bandwidth, at most the kernels' time) and half the rest of their time;
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
                # the mask's read goes whole, the tiles' compute by half (held-out neox_causal_mask, H100:
                # a bf16 [2, 1, 4096, 4096] mask read per head is 35 % of the kernels; is_causal=True
                # took them from 10.81 to 3.82 ms a step, 0.35 of their time, where half the tiles alone gives 0.5)
                mask_us = min(time_us, float(row[am.MA_MASK_BYTES]) / device.memory_bandwidth * 1e6) \
                    if device is not None else 0.0
                saving = mask_us + CAUSAL_SHARE * (time_us - mask_us)
                modes.add(f"{backend}: the mask's read (B·H·Lq·Lk elements per call / bandwidth) + {CAUSAL_SHARE:g} × "
                          "the rest of the attention kernels' time")
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


def enable_gqa(analysis: Analysis) -> Suggestion | None:
    """SDPA fed keys and values expanded from fewer heads (patterns.gqa_expand): the expansion copies'
    time, plus in decode (≤ DECODE_QUERIES query positions: the kernel is bound by the K/V bytes it
    reads) the attention kernels' time × (1 − 1/g); a longer query is bound by its FLOPs, which
    `enable_gqa=True` does not change."""
    scope = Scope.of(analysis)
    rows, total = [], 0.0
    for r, table in rank_tables(analysis, "gqa_expand"):
        t = table[in_headline(r, table[gq.GQ_STEP].to_numpy())]
        for shape, g in t.groupby(gq.GQ_SHAPE, sort=False):
            group = int(g[gq.GQ_GROUP].iat[0])
            decode = int(g[gq.GQ_QUERIES].max()) <= gq.DECODE_QUERIES
            copy_us, attn_us = float(g[gq.GQ_COPY_US].sum()), float(g[gq.GQ_ATTN_US].sum())
            saving = copy_us + (attn_us * (1.0 - 1.0 / group) if decode else 0.0)
            total += saving
            rows.append({"rank": r.rank, "shape": shape, "group": group, "queries": int(g[gq.GQ_QUERIES].max()),
                         "kv_len": f"{int(g[gq.GQ_MIN_LEN].min())}–{int(g[gq.GQ_MAX_LEN].max())}",
                         "calls_per_step": float(g[gq.GQ_CALLS].sum()) / scope.steps,
                         "copy_us_per_step": copy_us / scope.steps, "attention_us_per_step": attn_us / scope.steps,
                         "attention_share_saved": (1.0 - 1.0 / group) if decode else 0.0, "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -float(str(x["saving_us"])))
    saving = total / scope.ranks
    top = rows[0]
    formula = (f"the expansion copies' kernel time ({fmt_us(float(str(top['copy_us_per_step'])))} per step) + in decode "
               f"the attention kernels' time × (1 − 1/g), the K/V bytes a grouped kernel no longer reads g times "
               f"({fmt_us(float(str(top['attention_us_per_step'])))} per step × {float(str(top['attention_share_saved'])):.2f}) "
               f"= {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    title = (f"Pass enable_gqa=True to scaled_dot_product_attention instead of expanding K/V: "
             f"{top['calls_per_step']:.0f} calls per step ({top['shape']}) copy the keys and values {top['group']}× "
             f"first ({fmt_us(float(str(top['copy_us_per_step'])))} per step) and the attention reads them {top['group']}×")
    return suggestion("enable_gqa", title, saving, scope, formula, rows)


def enable_gqa_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The expansion copies' launches and kernels gone (model/whatif.py remove_calls over the calls
    that launched them); in decode the matched attention kernels × 1/g."""
    p = r.patterns
    if p is None or len(p.gqa_copies) != len(r.classification.table) or not p.gqa_copies.any():
        return None
    table = p.gqa_expand
    group = float(table[gq.GQ_GROUP].max())
    decode = int(table[gq.GQ_QUERIES].max()) <= gq.DECODE_QUERIES
    factor = np.where(p.gqa_attention & decode, 1.0 / group, 1.0)
    return compose([remove_calls(p.gqa_calls), scale_rows(factor)])


def filled_cache(analysis: Analysis) -> Suggestion | None:
    """Decoding attention over a whole static K/V cache under a padding mask (patterns.static_cache),
    in every headline step: the calls' attention kernels read all Lk positions where the filled prefix
    would do, and the mask's own kernels go with it. Traced: the attention time × (1 − filled / Lk),
    call by call, + the mask's kernels; the what-if also removes the calls that launch the latter.
    Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "static_cache", sc.SC_STEP):
        saving = float(t[sc.SC_SAVING_US].sum())
        total += saving
        calls = float(t[sc.SC_CALLS].sum())
        rows.append({"rank": r.rank, "shapes": str(t[sc.SC_SHAPES].iat[0]), "calls_per_step": calls / n,
                     "cache_positions": int(t[sc.SC_CACHE].max()),
                     "filled_positions": float((t[sc.SC_FILLED] * t[sc.SC_CALLS]).sum()) / calls,
                     "kernel_us_per_step": float(t[sc.SC_GPU_US].sum()) / n,
                     "attention_us_per_step": float(t[sc.SC_ATTN_US].sum()) / n,
                     "mask_us_per_step": float(t[sc.SC_MASK_US].sum()) / n, "saving_us": saving})
    if not rows:
        return None
    x = rows[0]
    cache, filled = int(str(x["cache_positions"])), float(str(x["filled_positions"]))
    title = (f"Attend over the filled part of the static K/V cache: "
             f"{plural(round(float(str(x['calls_per_step']))), 'attention call')} per step read all {cache:,} "
             f"cached positions under a padding mask while ~{filled:,.0f} are filled")
    formula = (f"the calls' attention kernels {fmt_us(float(str(x['attention_us_per_step'])))} per step × (1 − filled / "
               f"cached positions), call by call (~{filled:,.0f} / {cache:,}), + the mask's kernels "
               f"{fmt_us(float(str(x['mask_us_per_step'])))} per step")
    return suggestion("filled_cache", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def filled_cache_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Each call's attention kernels × its filled / Lk (patterns.static_cache_share); the mask's
    kernels and the calls that launch them gone (patterns.static_cache_calls)."""
    p = r.patterns
    share = p.static_cache_share if p is not None else None
    if share is None or len(share) != len(r.classification.table) or not (share < 1.0).any():
        return None
    return compose([remove_calls(p.static_cache_calls), scale_rows(share)])
