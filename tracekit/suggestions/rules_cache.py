"""Rules about KV caches: generation without one (the whole sequence re-run for every token, or a fixed context's cross-attention keys and values projected again for every token: use a cache) caches grown by torch.cat (preallocate the KV cache and write each new position in place) and caches rewritten whole at every token (write it in place: a ring buffer)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs import attribution
from tracekit.analyzers.costs.op_args import DTYPE_SIZE
from tracekit.analyzers.detectors import cache_growth as cg
from tracekit.analyzers.detectors import context_projection as cx
from tracekit.analyzers.detectors import generation as gn
from tracekit.analyzers.detectors import window_shift as ws
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import ATTENTION, CLASS, GEMM
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_bytes,
    fmt_us,
    gemm_dims,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_host import calls_gone
from tracekit.units import plural


def preallocate_kv_cache(analysis: Analysis) -> Suggestion | None:
    """torch.cat growing a cache a few positions per call (patterns.cache_growth): each call copies the
    whole cache. Saving: the cats' copy kernels' time less what an in-place write of the new positions
    into a buffer allocated once still moves (kernel time × n / (L + n) per call, the detector's kept_us).
    Silent below SILENT_BELOW_PCT of the step."""
    scope = Scope.of(analysis)
    groups: dict[tuple[int, str, int, int], _Group] = {}
    for r, table in rank_tables(analysis, "cache_growth"):
        if not len(table):
            continue
        t = table[in_headline(r, table[cg.CG_STEP].to_numpy())]
        for row in t.to_dict("records"):
            key = (r.rank, str(row[cg.CG_SHAPE]), int(row[cg.CG_DIM]), int(row[cg.CG_NEW]))
            groups.setdefault(key, _Group(kernel=str(row[cg.CG_KERNEL]))).add(row)
    if not groups:
        return None
    rows = [{"rank": rank, "op": "aten::cat", "shape": shape, "dim": dim, "new_positions": new,
             "lengths": f"{g.min_len}–{g.max_len}", "calls_per_step": g.calls / scope.steps, "kernel": g.kernel,
             "kernel_us_per_step": g.time_us / scope.steps, "in_place_us_per_step": g.kept_us / scope.steps,
             "saving_us_per_step": (g.time_us - g.kept_us) / scope.steps, "saving_us": g.time_us - g.kept_us}
            for (rank, shape, dim, new), g in groups.items()]
    rows.sort(key=lambda x: -float(str(x["saving_us"])))
    saving = sum(g.time_us - g.kept_us for g in groups.values()) / scope.ranks
    calls = sum(g.calls for g in groups.values()) / scope.steps / scope.ranks
    top = max(groups.items(), key=lambda kv: kv[1].time_us - kv[1].kept_us)
    (_, shape, _, new), g = top
    formula = (f"Σ over {plural(len(rows), 'cache shape')} of the cats' copy kernels' time − what writing the "
               f"new positions in place moves (kernel time × n / (L + n) per call) = {fmt_us(saving)} "
               f"({fmt_us(saving / scope.steps)} per step)")
    title = (f"Preallocate the KV cache: {plural(calls, 'torch.cat')} per step copy the whole cache "
             f"{shape} (L {g.min_len}–{g.max_len}) to append {plural(new, 'position')}")
    return suggestion("preallocate_kv_cache", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


@dataclass
class _Group:
    """One cache shape's growing cats over the headline steps (rows of patterns.cache_growth added up)."""

    kernel: str
    calls: int = 0
    time_us: float = 0.0
    kept_us: float = 0.0
    min_len: int = 1 << 62
    max_len: int = 0

    def add(self, row: dict[str, object]) -> None:
        self.calls += int(str(row[cg.CG_CALLS]))
        self.time_us += float(str(row[cg.CG_TIME_US]))
        self.kept_us += float(str(row[cg.CG_KEPT_US]))
        self.min_len = min(self.min_len, int(str(row[cg.CG_MIN_LEN])))
        self.max_len = max(self.max_len, int(str(row[cg.CG_MAX_LEN])))


# The shortest a kernel of a one-position forward takes: H200 elementwise kernels of a batch-1 GPT-2
# decode step (sample_traces/gpt2_decode) run 0.61 µs at least, 0.93 µs at the median.
MIN_KERNEL_US = 1.0
# Of an attention kernel's bytes (Q, K, V, O of L positions), the cached K and V it still reads whole
# with one query position (Q and O shrink with the rows).
KV_SHARE = 0.5


def cached_times(r: RankAnalysis, device: Device) -> np.ndarray:
    """Per rank.gpu row of a forward after the first in a cache-less generation loop
    (patterns.generation_share f > 0, f = n / L): its kernel's time in a one-position forward, NaN
    outside. A GEMM: its roof for f × its FLOPs and its weights (N × K of its op's shapes) read whole
    with f × the rest of its bytes; an attention kernel: f × its FLOPs, the cached K and V read whole
    (KV_SHARE of its bytes) and f × the rest; any other kernel: its roof for f × its FLOPs and bytes. At
    least MIN_KERNEL_US and at most its time now; a kernel of unknown cost keeps its time."""
    p = r.patterns
    costs, classes = r.costs.table, r.classification.table[CLASS].to_numpy(dtype=object)
    out = np.full(len(costs), np.nan)
    share, dur = p.generation_share, p.generation_gpu_us
    if len(share) != len(costs) or len(dur) != len(costs):
        return out
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    for i in np.flatnonzero(share > 0).tolist():
        f, d, dtype = float(share[i]), float(dur[i]), costs[attribution.DTYPE].iat[i]
        peak = device.peak_flops(str(dtype)) if dtype else None
        if f >= 1.0 or math.isnan(flops[i]) or math.isnan(nbytes[i]) or not peak:
            out[i] = d
            continue
        kept = 0.0
        if classes[i] == GEMM:
            dims = gemm_dims(costs[attribution.OP].iat[i], costs[attribution.SHAPES].iat[i])
            kept = min(dims[1] * dims[2] * DTYPE_SIZE.get(str(dtype), 4.0), nbytes[i]) if dims is not None else 0.0
        elif classes[i] == ATTENTION:
            kept = KV_SHARE * nbytes[i]
        roof = max(f * flops[i] / peak, (kept + f * (nbytes[i] - kept)) / device.memory_bandwidth) * 1e6
        out[i] = min(d, max(roof, MIN_KERNEL_US))
    return out


def weight_bytes(r: RankAnalysis) -> float:
    """The weights (N × K of the op's shapes) the GEMM kernels of the forwards after the first read."""
    p, costs = r.patterns, r.costs.table
    rows = np.flatnonzero((p.generation_share > 0) & (r.classification.table[CLASS].to_numpy(dtype=object) == GEMM)) \
        if len(p.generation_share) == len(costs) else np.zeros(0, dtype=np.int64)
    total = 0.0
    for i in rows.tolist():
        dims = gemm_dims(costs[attribution.OP].iat[i], costs[attribution.SHAPES].iat[i])
        if dims is not None:
            total += dims[1] * dims[2] * DTYPE_SIZE.get(str(costs[attribution.DTYPE].iat[i]), 4.0)
    return total


def use_kv_cache(analysis: Analysis) -> Suggestion | None:
    """Generation that re-runs the model over the whole sequence for every token (patterns.generation),
    outside training: with a KV cache the first forward (the prefill) stays and each later one runs
    one position (cached_times). As traced, per step over the later forwards: max(their launch path,
    their GPU time) − max(their launch path, their GPU time at one position); the what-if replays the
    step with their kernels at those times and the host as it is."""
    scope = Scope.of(analysis)
    device = analysis.device
    if device is None or any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None
    rows: list[dict[str, Any]] = []
    total = 0.0
    for r, table in rank_tables(analysis, "generation"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[gn.GN_STEP].to_numpy())]
        if not len(t):
            continue
        after = cached_times(r, device)
        host, gpu = float(t[gn.GN_HOST_US].sum()), float(t[gn.GN_GPU_US].sum())
        traced = float(np.nansum(r.patterns.generation_gpu_us))  # every step's: the headline's at the same ratio
        cached = gpu * float(np.nansum(after)) / traced if traced > 0 else gpu
        saving = max(max(host, gpu) - max(host, cached), 0.0)
        total += saving
        n = scope.steps
        k = float(np.median(t[gn.GN_FORWARDS].to_numpy(dtype=float)))
        rows.append({"rank": r.rank, "forwards_per_step": k, "forward": str(t[gn.GN_OPS].iat[0]),
                     "lengths": f"{int(t[gn.GN_FIRST].min())}–{int(t[gn.GN_LAST].max())}",
                     "stride": int(t[gn.GN_STRIDE].iat[0]), "growing_gemms": int(t[gn.GN_GEMMS].iat[0]),
                     "launches_per_forward": float(t[gn.GN_LAUNCHES].mean()),
                     "weight_bytes_per_forward": weight_bytes(r) / max(float(table[gn.GN_FORWARDS].sum() - len(table)), 1.0),
                     "host_us_per_step": host / n, "gpu_us_per_step": gpu / n, "cached_gpu_us_per_step": cached / n,
                     "saving_us": saving})
    if not rows:
        return cache_cross_kv(analysis)
    saving = total / scope.ranks
    x = rows[0]
    k, n, later = x["forwards_per_step"], x["stride"], x["forwards_per_step"] - 1
    w = x["weight_bytes_per_forward"]
    host, gpu, cached = x["host_us_per_step"], x["gpu_us_per_step"], x["cached_gpu_us_per_step"]
    formula = (f"{k:.0f} forwards per step over {x['lengths']} positions (+{n} each): the first (the prefill) "
               f"kept, each of the {later:.0f} others at {n} position{'s' if n > 1 else ''} with f = {n}/L of its "
               f"rows: GEMMs at max(FLOPs × f / peak, (weights + the rest of their bytes × f) / bandwidth) "
               f"({fmt_bytes(w)} of weights per forward / {device.memory_gbps / 1e3:.2f} TB/s = "
               f"{fmt_us(w / device.memory_bandwidth * 1e6)}), attention reading the cached K and V ({KV_SHARE:.0%} "
               f"of its bytes) with FLOPs × f, other kernels at their roof for f × their work (≥ {MIN_KERNEL_US:g} µs "
               f"each): the later forwards' GPU time {fmt_us(gpu)} → {fmt_us(cached)} per step; each forward still "
               f"pays its launch path ({fmt_us(host / later)} as traced, {x['launches_per_forward']:.0f} launches): "
               f"max({fmt_us(host)}, {fmt_us(gpu)}) − max({fmt_us(host)}, {fmt_us(cached)}) = "
               f"{fmt_us(saving / scope.steps)} per step")
    title = (f"Use a KV cache: each step re-runs the model over the whole sequence for every new token "
             f"({k:.0f} forwards over {x['lengths']} positions, +{n} each); prefill once and run one position per token")
    return suggestion("use_kv_cache", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def cache_cross_kv(analysis: Analysis) -> Suggestion | None:
    """A decoding loop that projects a fixed context (an encoder's output: cross-attention keys and values)
    in every forward (patterns.context_projection), outside training, in every headline step: with the
    projections cached per sequence, the forwards after the first skip them. Traced: their kernels' time;
    the what-if removes their calls and kernels (use_kv_cache_transform)."""
    scope = Scope.of(analysis)
    if any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None
    rows: list[dict[str, Any]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "context_projection", cx.CX_STEP):
        gpu = float(t[cx.CX_GPU_US].sum())
        total += gpu
        rows.append({"rank": r.rank, "mode": "cross", "forwards_per_step": float(t[cx.CX_FORWARDS].sum()) / n,
                     "projections_per_forward": int(t[cx.CX_GEMMS].max()), "context_rows": int(t[cx.CX_ROWS].max()),
                     "query_rows": int(t[cx.CX_QUERY_ROWS].min()), "shape": str(t[cx.CX_SHAPE].iat[0]),
                     "launches_per_step": float(t[cx.CX_CALLS].sum()) / n, "gpu_us_per_step": gpu / n, "saving_us": gpu})
    if not rows:
        return None
    x = rows[0]
    saving = total / scope.ranks
    later = x["forwards_per_step"] - 1
    title = (f"Cache the cross-attention keys and values: every one of {x['forwards_per_step']:.0f} decoding forwards "
             f"per step projects the same {x['context_rows']}-row context again ({x['projections_per_forward']} GEMMs "
             f"{x['shape']} per forward, against {x['query_rows']} rows for the new tokens); project it once per sequence")
    formula = (f"the projections' kernels in the {later:.0f} forwards after the first: {fmt_us(x['gpu_us_per_step'])} "
               f"per step ({x['launches_per_step']:.0f} launches), gone; the cross-attention still reads the cached "
               "keys and values")
    return suggestion("use_kv_cache", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def ring_buffer_cache(analysis: Analysis) -> Suggestion | None:
    """Decoding caches rewritten whole at every token (patterns.window_shift), in every headline step:
    the rewrites' kernel time. The what-if removes their calls and kernels (an in-place write of one
    slot is left for the new token; its cost is a slot's, not counted). Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "window_shift", ws.WS_STEP):
        gpu = float(t[ws.WS_GPU_US].sum())
        total += gpu
        rows.append({"rank": r.rank, "rewrites_per_step": float(t[ws.WS_REWRITES].sum()) / n,
                     "attention_calls_per_step": float(t[ws.WS_ATTENTION].sum()) / n, "ops": str(t[ws.WS_OPS].iat[0]),
                     "cache": str(t[ws.WS_CACHE].iat[0]), "gpu_us_per_step": gpu / n, "saving_us": gpu})
    if not rows:
        return None
    x = rows[0]
    title = (f"Write each token's K/V in place: every step rewrites its attention caches whole "
             f"({round(float(str(x['rewrites_per_step'])))} passes per step: {x['ops']} over {x['cache']}), "
             f"{fmt_us(float(str(x['gpu_us_per_step'])))} of GPU time per step; a ring buffer (index_copy_ at "
             "pos % window) or a static cache's slot moves one position")
    formula = "Σ of the whole-cache rewrites' kernel time (gathers, zero/fill, in-place adds and copies of the cache's full shape), per step"
    return suggestion("ring_buffer_cache", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


ring_buffer_transform = calls_gone("window_shift_calls")  # the whole-cache rewrites' calls and their kernels
