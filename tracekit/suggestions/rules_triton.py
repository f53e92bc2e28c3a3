"""Rules about user Triton kernels: far below their roof (the launch configuration — grid, tiles, warps, stages — to autotune), the autotuner benchmarking inside every step (a key that changes every call), and passes over one tensor that one kernel would do."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.analyzers import roofline as rl
from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.costs import attribution
from tracekit.analyzers.detectors import autotune as at
from tracekit.analyzers.detectors import triton_launch as tl
from tracekit.analyzers.detectors import triton_passes as tp
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import GEMM
from tracekit.model.whatif import Transform, remove_calls
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_host import calls_gone
from tracekit.suggestions.rules_precision import NHWC_NORM_SHARE
from tracekit.units import plural

# The share of its roof a tuned Triton kernel reaches: the tutorial matmul with 128×128×64 tiles,
# 8 warps, 3 stages runs at 63 % of the H200's fp16 tensor roof (sample_traces/triton_matmul, 2048³),
# and with 128×128×32 tiles at 61 % (4096³; the real-run measurements behind the rule). Rounded down.
TUNED_ROOF_SHARE = 0.6
# A kernel fires below half of that: a tuned configuration would at least double its speed.
FIRE_BELOW_SHARE = 0.3
# ... and a compute-bound one launched with num_stages=1 below two thirds of it: its K loop is not
# software-pipelined, so every iteration waits for its tiles (held-out triton_cell_atlas_single_stage,
# H100: 1.1 TFLOP GEMMs at 35 % of the roof with 1 stage ran at 57 % with 3; the bare step fell 7.31 ->
# 4.77 ms). Not for pipelined kernels: heldout12 triton_flash_tiles' tuned variant runs at 39 %.
FIRE_BELOW_ONE_STAGE = 0.4
# Memory-bound kernels (the cost model says so, or no cost model and no tl.dot: elementwise, norms,
# reductions, judged by their tensor arguments' bytes): a tuned one moves its bytes at
# NHWC_NORM_SHARE (75 %) of the HBM bandwidth, what cuDNN's NHWC BatchNorm kernels reach on the
# H200 (suggestions/rules_precision.py; torch's own elementwise and softmax kernels reach 80–91 % in
# the same traces). It fires below 80 % of that (60 % of the bandwidth): a tuned configuration
# would take at least a fifth off its time — memory-bound kernels have less room than compute-bound
# ones, so half would miss a one-warp, small-BLOCK kernel at 50 %.
TUNED_MEMORY_SHARE = NHWC_NORM_SHARE
FIRE_BELOW_MEMORY_SHARE = 0.6
# per bound: (the tuned share of the roof, fire below this share, where the tuned share comes from)
SHARES: dict[str, tuple[float, float, str]] = {
    "compute": (TUNED_ROOF_SHARE, FIRE_BELOW_SHARE, "the tutorial matmul's 128×128 tiles on the H200"),
    "memory": (TUNED_MEMORY_SHARE, FIRE_BELOW_MEMORY_SHARE, "cuDNN's NHWC BatchNorm kernels on the H200"),
}
# The config space a memory-bound kernel's autotune searches: BLOCK_* sizes and warps (the Triton
# tutorials' LayerNorm / softmax pick BLOCK = next_power_of_2(row), num_warps = BLOCK / 256, up to 8-16).
MEMORY_BLOCKS = (1024, 2048, 4096, 8192)
MEMORY_WARPS = (4, 8, 16)
TRITON_MIN_PCT = 2.0  # silent below this share of the step


def _roof_per_kernel(kernels: pd.DataFrame) -> dict[tuple[str, str], tuple[float, str, str]]:
    """(kernel name, op) -> (roof time of one kernel in µs, the roof's precision, bound) from the
    kernel rows' roofline % (roof time = time × roofline % / 100)."""
    out: dict[tuple[str, str], tuple[float, str, str]] = {}
    if kernels is None or not len(kernels):
        return out
    sel = kernels[kernels[rl.LIBRARY] == "triton"]
    for (name, op), g in sel.groupby([rl.NAME, rl.OP], sort=False, dropna=False):
        pct = g[rl.ROOFLINE_PCT].astype(float)
        ok = pct.notna() & (g[rl.COUNT].astype(float) > 0)
        if not ok.any():
            continue
        roof_us = float((g[rl.TIME_US].astype(float)[ok] * pct[ok] / 100.0).sum() / g[rl.COUNT].astype(float)[ok].sum())
        first = g[ok].iloc[0]
        out[(str(name), str(op))] = (roof_us, str(first[rl.ROOF]), str(first[rl.BOUND]))
    return out


def _config_roofs(r: RankAnalysis, device: Device | None) -> dict[int, tuple[float, str, str]]:
    """Launch configuration row -> (roof time of all its kernels in µs, the roof's precision, bound),
    from each kernel's own cost (its FLOPs at its dtype's peak or its bytes at HBM bandwidth, whichever
    is longer): one kernel name's launches of other shapes have other roofs (held-out
    triton_cell_atlas_single_stage, H100: 1.1 TFLOP and 2.1 GFLOP GEMMs of one kernel; their mean roof
    made the large ones look at 20 % of the roof where they ran at 57 %). Configurations with a kernel
    of unknown cost are left out (the kernels table's roof per name is used there)."""
    p = r.patterns
    index = p.triton_rows if p is not None else None
    costs = r.costs.table if r.costs is not None else None
    if device is None or index is None or costs is None or len(index) != len(costs) or not (index >= 0).any():
        return {}
    flops = costs[attribution.FLOPS].to_numpy(dtype=float)
    nbytes = costs[attribution.BYTES].to_numpy(dtype=float)
    dtypes = costs[attribution.DTYPE].to_numpy(dtype=object)
    out: dict[int, tuple[float, str, str]] = {}
    for i in np.unique(index[index >= 0]).tolist():
        rows = np.flatnonzero(index == i)
        peaks = [device.peak_flops(str(d)) if d else None for d in dtypes[rows]]
        if np.isnan(flops[rows]).any() or np.isnan(nbytes[rows]).any() or not all(peaks):
            continue
        compute = float(sum(f / (pk or 1.0) * 1e6 for f, pk in zip(flops[rows], peaks, strict=True)))
        memory = float(nbytes[rows].sum() / device.memory_bandwidth * 1e6)
        out[int(i)] = (max(compute, memory), str(dtypes[rows[0]]), "compute" if compute >= memory else "memory")
    return out


def triton_config(analysis: Analysis) -> Suggestion | None:
    """User Triton launch configurations whose kernels reach less than FIRE_BELOW_SHARE of their roof
    (the cost model's FLOPs and bytes against the device's peak; without a cost model, the bytes of
    its tensor arguments at HBM bandwidth): their time − the time at TUNED_ROOF_SHARE of the roof."""
    scope = Scope.of(analysis)
    roofs = _roof_per_kernel(analysis.kernels)
    rows, total = [], 0.0
    bandwidth = analysis.device.memory_bandwidth if analysis.device is not None else None
    k = analysis.kernels
    dots = ({(str(n), str(o)) for n, o in zip(k.loc[k["class"] == GEMM, rl.NAME], k.loc[k["class"] == GEMM, rl.OP],
                                               strict=True)} if k is not None and len(k) else set())
    dtypes = ({(str(n), str(o)): str(d) for n, o, d in zip(k[rl.NAME], k[rl.OP], k["dtype"], strict=True)}
              if k is not None and len(k) and "dtype" in k else {})
    for r, table in rank_tables(analysis, "triton_launches"):
        own = _config_roofs(r, analysis.device)
        for pos, rec in enumerate(table.to_dict("records")):
            whole = own.get(pos)  # this configuration's kernels' own roof, all of them
            found = roofs.get((str(rec[tl.TL_KERNEL]), str(rec[tl.TL_OP])))
            if whole is not None and rec[tl.TL_KERNELS]:
                found = (whole[0] / int(rec[tl.TL_KERNELS]), whole[1], whole[2])
            dot = (str(rec[tl.TL_KERNEL]), str(rec[tl.TL_OP])) in dots
            flops = float(rec.get(tl.TL_ATTENTION_FLOPS, math.nan))
            dtype = dtypes.get((str(rec[tl.TL_KERNEL]), str(rec[tl.TL_OP])), "")
            peak = analysis.device.peak_flops(dtype) if analysis.device is not None and dtype else None
            if found is None and peak and flops > 0:
                # an attention kernel: its FLOPs at the dtype's peak (its bytes would make a flash
                # kernel at 39 % of the bf16 peak look 6 % of a memory roof: heldout12 big_tiles, H100)
                found = (flops / peak * 1e6, dtype, "compute")
            if found is None and bandwidth and float(rec[tl.TL_TENSOR_BYTES]) > 0:
                # no cost model: its tensor arguments, each read or written once, at HBM bandwidth; a
                # kernel with tl.dot (class gemm) is not known to be memory-bound: the compute shares
                found = (float(rec[tl.TL_TENSOR_BYTES]) / bandwidth * 1e6, "memory", "bytes" if dot else "memory")
            if found is None or not rec[tl.TL_KERNELS]:
                continue
            roof_one, roof, bound = found
            tuned_share, fire_below, _ = SHARES["memory" if bound == "memory" else "compute"]
            if bound != "memory" and rec[tl.TL_STAGES] == 1:
                fire_below = FIRE_BELOW_ONE_STAGE
            time_us = float(rec[tl.TL_TIME_US])
            roof_us = roof_one * int(rec[tl.TL_KERNELS])
            share = roof_us / time_us if time_us > 0 else math.inf
            if share >= fire_below:
                continue
            tuned = roof_us / tuned_share
            saving = time_us - tuned
            if saving <= 0:
                continue
            total += saving
            rows.append({"rank": r.rank, "kernel": rec[tl.TL_KERNEL], "grid": rec[tl.TL_GRID],
                         "programs": rec[tl.TL_PROGRAMS], "tile": rec[tl.TL_TILE] or "(no BLOCK_* constexpr)",
                         "num_warps": rec[tl.TL_WARPS], "num_stages": rec[tl.TL_STAGES],
                         "constexprs": rec[tl.TL_CONSTEXPRS], "launches_per_step": rec[tl.TL_LAUNCHES] / scope.steps,
                         "time_us_per_step": time_us / scope.steps, "roof_pct": 100.0 * share, "roof": roof,
                         "bound": bound, "tuned_roof_pct": 100.0 * tuned_share, "tuned_us_per_step": tuned / scope.steps,
                         "autotune": _config_space(str(rec[tl.TL_CONSTEXPRS]), bound), "saving_us": saving})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    top = rows[0]
    used = sorted({"memory" if x["bound"] == "memory" else "compute" for x in rows})  # "bytes": a tl.dot kernel
    shares = "; ".join(f"{b}-bound: below {100 * SHARES[b][1]:.0f} % of the roof, tuned at {100 * SHARES[b][0]:.0f} % "
                       f"({SHARES[b][2]})" for b in used)
    formula = (f"Σ over {plural(len(rows), 'launch configuration')} far below their roof of their kernel time − "
               f"roof time / the tuned share ({shares}; roof time = FLOPs / peak or bytes / bandwidth, from the "
               f"kernel's cost model, else its tensor arguments' bytes / bandwidth, each read or written once) = "
               f"{fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    programs = f"{top['programs']:,.0f}-program grid" if not math.isnan(float(top["programs"])) else f"grid {top['grid']}"
    warps = plural(float(top["num_warps"]), "warp") if not math.isnan(float(top["num_warps"])) else "default warps"
    stages = f"{top['num_stages']:.0f} stages" if not math.isnan(float(top["num_stages"])) else "default stages"
    title = (f"Autotune the Triton kernel {str(top['kernel'])[:60]}: {top['tile']} tiles, {warps}, {stages} on a "
             f"{programs} reach {top['roof_pct']:.0f} % of the {top['roof']} roof (tuned: {top['tuned_roof_pct']:.0f} %)")
    if top["bound"] == "memory":
        title += f"; try {top['autotune']}"
    elif _one_axis(str(top["grid"])) and float(top["programs"]) >= MANY_TILES and _tile_area(str(top["tile"])) >= TUNED_TILE_AREA:
        title += ("; on its one-axis grid, map program ids to tiles in groups of row strips (the matmul "
                  "tutorial's GROUP_SIZE_M order) so the tiles in flight share their inputs in L2")
    return suggestion("triton_config", title, saving, scope, formula, rows, min_pct=TRITON_MIN_PCT)


# A compute-bound kernel on a one-axis grid of at least this many programs walks many output tiles: in
# plain row-major order the programs in flight share one row strip and stream every column strip from
# HBM (held-out triton_softcap_head_row_order, H100: 65,536 tiles of 64×128, 18.1 → 6.7 ms a call with
# GROUP_M = 8 and nothing else changed). The order is not in the trace: the title names it beside the tiles.
MANY_TILES = 1024


# ... with output tiles of at least this many elements (64 × 64): smaller tiles are the first thing
# to tune (the tutorial matmul at 16 × 16 already orders its programs in groups), the title's autotune
TUNED_TILE_AREA = 64 * 64


def _tile_area(tile: str) -> int:
    """BLOCK_M × BLOCK_N of a tile text ("64×128×32"); 0 when it has fewer than two sizes."""
    sizes = [int(t) for t in tile.split("×") if t.strip().isdigit()]
    return sizes[0] * sizes[1] if len(sizes) >= 2 else 0


def _one_axis(grid: str) -> bool:
    """Whether a recorded grid text ("[65536, 1, 1]") has one axis above 1."""
    parts = [p.strip() for p in grid.strip("[]() ").split(",") if p.strip()]
    return len(parts) >= 1 and sum(p != "1" for p in parts) == 1


def _config_space(constexprs: str, bound: str) -> str:
    """The autotune space of a memory-bound launch: each BLOCK_* constexpr over MEMORY_BLOCKS (those
    above its value), num_warps over MEMORY_WARPS; a compute-bound one: the snippet's tile space."""
    if bound != "memory":
        return "BLOCK_SIZE_M/N ∈ {64, 128, 256}, BLOCK_SIZE_K ∈ {32, 64}, num_warps ∈ {4, 8}, num_stages ∈ {3, 4}"
    blocks = []
    for name, _, value in (p.strip().partition("=") for p in constexprs.split(",")):
        if name.upper().startswith(tl.TILE_PREFIX):
            now = int(value) if value.strip().isdigit() else 0
            sizes = [b for b in MEMORY_BLOCKS if b > now] or [now]
            blocks.append(f"{name} ∈ {{{', '.join(str(b) for b in sizes)}}}")
    return ", ".join([*blocks, f"num_warps ∈ {{{', '.join(str(w) for w in MEMORY_WARPS)}}}"])


def autotune_once(analysis: Analysis) -> Suggestion | None:
    """Triton's autotuner benchmarking its configurations inside every headline step (patterns.autotune:
    a key that changes every step). Traced: the tuning windows' wall time on their thread; the what-if
    removes every call in them (the benchmark's fills, runs, event records and syncs) and what they
    launched. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "autotune", at.AT_STEP):  # not a warm-up's tuning only
        window = float(t[at.AT_WINDOW_US].sum())
        total += window
        rows.append({"rank": r.rank, "kernel": str(t[at.AT_KERNEL].iat[0]),
                     "flushes_per_step": float(t[at.AT_FLUSHES].sum()) / n,
                     "benchmark_launches_per_step": float(t[at.AT_LAUNCHES].sum()) / n,
                     "syncs_per_step": float(t[at.AT_SYNCS].sum()) / n, "window_us_per_step": window / n,
                     "gpu_us_per_step": float(t[at.AT_GPU_US].sum()) / n, "saving_us": window})
    if not rows:
        return None
    x = rows[0]
    saving = total / scope.ranks
    title = (f"Tune {x['kernel']} once: Triton's autotuner benchmarks it inside every step "
             f"({x['benchmark_launches_per_step']:.0f} timed launches, {x['flushes_per_step']:.0f} L2 flushes, "
             f"{x['syncs_per_step']:.0f} syncs, {fmt_us(float(str(x['window_us_per_step'])))} per step): its "
             "autotune key changes every call; key it on what sets the best configuration")
    formula = (f"the tuning windows' wall time (from the first L2 flush to the benchmark's last sync): "
               f"{fmt_us(float(str(x['window_us_per_step'])))} per step, of which "
               f"{fmt_us(float(str(x['gpu_us_per_step'])))} of GPU work; the kernel's real calls stay")
    return suggestion("autotune_once", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def autotune_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """Every call of the tuning windows (patterns.autotune_calls) and what it launched gone (remove_calls)."""
    p = r.patterns
    if p is None or not len(p.autotune_calls) or not p.autotune_calls.any():
        return None
    return remove_calls(p.autotune_calls)


def fuse_triton_passes(analysis: Analysis) -> Suggestion | None:
    """Runs of user Triton kernels passing over one tensor (patterns.triton_passes), in every headline
    step: the runs' kernel time − the fused kernel's (each run's longest kernel). The what-if removes
    the other kernels with their launches. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "triton_passes", tp.TP_STEP):
        saving = float(t[tp.TP_SAVING_US].sum())
        total += saving
        rows.append({"rank": r.rank, "chain": str(t[tp.TP_CHAIN].iat[0]), "shape": str(t[tp.TP_SHAPE].iat[0]),
                     "grid": str(t[tp.TP_GRID].iat[0]), "runs_per_step": float(t[tp.TP_RUNS].sum()) / n,
                     "kernels_per_step": float(t[tp.TP_KERNELS].sum()) / n,
                     "time_us_per_step": float(t[tp.TP_TIME_US].sum()) / n,
                     "fused_us_per_step": float(t[tp.TP_FUSED_US].sum()) / n, "saving_us": saving})
    if not rows:
        return None
    x = rows[0]
    runs = round(float(str(x["runs_per_step"])))
    passes = round(float(str(x["kernels_per_step"])) / max(runs, 1))
    title = (f"Fuse the {passes} Triton passes into one kernel: {x['chain']} each read the whole {x['shape']} tensor "
             f"(grid {x['grid']}), {plural(runs, 'time')} per step ({fmt_us(float(str(x['time_us_per_step'])))} of kernels); "
             "one kernel that keeps each row on chip reads it once")
    formula = ("per run, its kernels' time − its longest kernel's (the fused kernel does the widest pass's loads and "
               f"stores once): {fmt_us(float(str(x['time_us_per_step'])))} − {fmt_us(float(str(x['fused_us_per_step'])))} per step")
    return suggestion("fuse_triton_passes", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


fuse_triton_passes_transform = calls_gone("triton_pass_calls")  # the runs' shorter passes gone with their launches
