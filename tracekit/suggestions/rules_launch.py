"""Rules about launch overhead: capture the step in a CUDA graph; batch a loop of small GEMMs into one bmm."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import compiled as cd
from tracekit.analyzers.detectors import ensembles, samples, sequences
from tracekit.analyzers.devices import Device
from tracekit.analyzers.kernels import ATTENTION
from tracekit.analyzers.launch import A_GAP_US, A_IDLE, HOST_WAIT, LAUNCH_BOUND, MIXED, step_numbers
from tracekit.analyzers.roofline import roof_for
from tracekit.analyzers.windows import SCOPE_INFERRED
from tracekit.suggestions.common import (
    MIN_SAVING_PCT,
    SILENT_BELOW_PCT,
    Scope,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_batching import ensemble_rows
from tracekit.trace.grouping import rows_by_key

# Host-wait gaps longer than this are CPU work a graph does not remove (data loading, Python
# between iterations, waiting on a sync), not the per-kernel launch path.
LONG_GAP_US = 1000.0
# What one kernel-to-kernel gap costs when a CUDA graph replays the kernels back to back. Measured
# on the H200 sample traces (docs/validation.md, suggestions section): median 0.09 µs between 256
# small GEMMs, 0.42 µs through a GPT-2 decode step; rounded up. The eager trace's own back-to-back
# gaps are no guide: each still carries its kernel's launch latency.
GRAPH_GAP_US = 0.5
CUDA_GRAPHS_MIN_PCT = 5.0  # a graph is a real change: suggest it only when it pays
MIN_GAPS_PER_STEP = 10  # ... and when there are launches to remove (one kernel a step gains nothing;
# with inferred steps, one graph spans many of them: the launches of the whole run count)
# The step's compiled graphs issue at least this share of its runtime calls: the change is
# mode="reduce-overhead" on them; with fewer, a graph of the step (compile the model whole)
COMPILED_CALLS_SHARE = 0.5
# Compiled regions per step, none inside another (functions compiled one by one and called from eager
# code), from which the title names compiling the model instead: heldout23 trajectory_compiled_helpers,
# 496 helper calls a step (rms_norm, swiglu) between eager linears and SDPA.
HELPER_REGIONS_MIN = 16
# A KV cache that grows as the step decodes: one attention call signature (op, query shape) whose key
# input takes at least this many lengths in the headline steps (transformers' DynamicCache: torch.cat
# of every layer's cache at every token, new shapes and addresses each time).
GROWING_CACHE_LENGTHS = 3
# batch_bmm stays silent on loops that already keep the GPU full: GEMMs whose grid fills every SM,
# or loops whose GEMMs run this share of the loop's wall time (batching removes only the gaps).
LOOP_BUSY_SHARE = 0.9


def growing_kv_cache(analysis: Analysis) -> tuple[str, tuple[int, ...]] | None:
    """(op, the key lengths) of an attention-class kernel's op whose calls with one query shape see
    keys that differ in one dimension only, at least GROWING_CACHE_LENGTHS lengths of it: a KV
    cache that grows from call to call in the headline steps. None when there is none."""
    k = analysis.kernels
    if k is None or not len(k):
        return None
    keys: dict[tuple[str, tuple[int, ...]], set[tuple[int, ...]]] = {}
    for op, shapes in zip(k.loc[k["class"] == ATTENTION, "op"], k.loc[k["class"] == ATTENTION, "shapes"], strict=True):
        dims = [tuple(d) for d in (shapes or ()) if isinstance(d, tuple) and d and all(isinstance(x, int) for x in d)]
        if len(dims) >= 2 and len(dims[0]) == len(dims[1]):
            keys.setdefault((str(op), dims[0]), set()).add(dims[1])
    for (op, _), seen in keys.items():
        if len(seen) < GROWING_CACHE_LENGTHS:
            continue
        varying = [i for i in range(len(next(iter(seen)))) if len({key[i] for key in seen}) > 1]
        if len(varying) == 1:
            return op, tuple(sorted(key[varying[0]] for key in seen))
    return None


def data_dependent_shapes(analysis: Analysis) -> str | None:
    """What gives the headline steps shapes that change from call to call, in words: a growing KV cache
    (growing_kv_cache) or a per-sample loop whose sizes come from the data (patterns.sample_loops);
    None when neither. A CUDA graph replays the shapes it captured, so it cannot capture such a step."""
    cache = growing_kv_cache(analysis)
    if cache is not None:
        return f"{cache[0]}'s key lengths {cache[1][0]}–{cache[1][-1]}"
    for r in analysis.ranks:
        t = r.patterns.sample_loops if r.patterns is not None else None
        if t is not None and len(t):
            t = t[t[samples.SL_MAX] > t[samples.SL_MIN]]  # same-shaped slices (samples.JOINS): capturable
        if t is not None and len(t) and in_headline(r, t[samples.SL_STEP].to_numpy()).any():
            return f"a per-sample loop with sizes {int(t[samples.SL_MIN].min())}–{int(t[samples.SL_MAX].max())}"
    return None


def cuda_graphs(analysis: Analysis) -> Suggestion | None:
    """Launch-bound steps: span − GPU busy − what stays after the launch gaps are gone. Silent on a
    step whose shapes come from the data (data_dependent_shapes: a KV cache that grows, a per-sample
    loop): a CUDA graph replays fixed shapes and addresses, so it cannot capture such a step as written
    (a static cache first: transformers' StaticCache, as sample_traces/scripts/gpt2_decode.py does for
    gpt2_decode_graph.py; padded samples: batch_samples)."""
    scope = Scope.of(analysis)
    if not launch_limited(analysis.verdict, analysis.cause):
        return None  # the GPU is not waiting for launches: a graph would not shorten the step
    if data_dependent_shapes(analysis) is not None:
        return None
    rows: list[dict[str, Any]] = []
    total, gaps_total, n_total, resid_total = 0.0, 0.0, 0, 0.0
    n_graphed = n_optimizer = 0
    for r in analysis.ranks:
        lo = r.launch
        if lo.totals.gpu_ops == 0:
            continue
        act = lo.activities
        host = (act[A_IDLE] == HOST_WAIT).to_numpy() & (act[A_GAP_US].to_numpy() <= LONG_GAP_US)
        gap = act[A_GAP_US].fillna(0.0).to_numpy()
        # the step's first activity still waits for the CPU: a graph has one launch per step too
        # (activities are in rank.gpu order, sorted by start). Inferred steps are repeats of the op
        # sequence (a loop's iterations, decode tokens): one graph captures many of them, so only the
        # first of the run keeps its wait
        steps = step_numbers(lo)
        _, first = np.unique(steps, return_index=True)
        host[first[:1] if lo.scope == SCOPE_INFERRED else first] = False
        # launched inside optimizer.step: a graph of the model (the snippet) leaves the optimizer out;
        # its launches are the fused_optimizer rule's (analyzers/detectors/optimizer.py)
        in_optimizer = optimizer_rows(r)
        if in_optimizer is not None and len(in_optimizer) == len(host) and in_optimizer.any():
            n_optimizer += int((host & in_optimizer).sum())
            host &= ~in_optimizer
        graphed = getattr(r, "graphs", None)  # replayed from a CUDA graph already: no gap to remove
        if graphed is not None and len(graphed.replayed) == len(host):
            host &= ~graphed.replayed
            n_graphed += int(graphed.replayed.sum())
        host_of = rows_by_key(np.flatnonzero(host), steps)  # per step, its host-wait rows in order
        for st, t, keep in zip(lo.steps["step"].tolist(), lo.step_totals, lo.selected, strict=True):
            if not keep:
                continue
            mine = host_of.get(int(st), np.zeros(0, dtype=np.int64))
            n = len(mine)
            launch_gaps = float(gap[mine].sum())
            residual = n * GRAPH_GAP_US
            # at most the step's GPU idle waiting for launches (every stream idle: never busy or collective
            # time, nor waits a graph does not remove: syncs, data loading, unexplained GPU-side gaps)
            idle = t.launch_gap_us
            saving = min(idle, max(launch_gaps - residual, 0.0))
            total += saving
            gaps_total += launch_gaps
            n_total += n
            resid_total += residual
            if saving <= 0:
                continue
            rows.append({"rank": r.rank, "step": int(st), "span_us": t.span_us, "gpu_busy_us": t.gpu_busy_us,
                         "kernels": t.kernels, "launches": t.launches, "cpu_launch_us": t.cpu_launch_us,
                         "launch_gaps": n, "launch_gap_us": launch_gaps, "residual_us": residual,
                         "saving_us": saving, "verdict": t.verdict})
    inferred = all(r.launch.scope == SCOPE_INFERRED for r in analysis.ranks)
    if not rows or n_total / ((1 if inferred else scope.steps) * scope.ranks) < MIN_GAPS_PER_STEP:
        return None
    saving = total / scope.ranks
    span = sum(x["span_us"] for x in rows) / scope.ranks
    busy = sum(x["gpu_busy_us"] for x in rows) / scope.ranks
    formula = (f"span − GPU busy − what remains = {fmt_us(span)} − {fmt_us(busy)} − "
               f"{fmt_us(span - busy - saving)} = {fmt_us(saving)}; the launch gaps are the "
               f"{n_total / scope.ranks:.0f} host-wait gaps ≤ {LONG_GAP_US:.0f} µs after each step's first activity "
               f"({fmt_us(gaps_total / scope.ranks)}), each replaced by a graph's kernel-to-kernel gap of "
               f"{GRAPH_GAP_US} µs (measured on H200) ({fmt_us(resid_total / scope.ranks)}); per step, at most "
               "the step's GPU idle waiting for launches")
    if n_optimizer:
        formula += (f"; {n_optimizer / scope.ranks:.0f} launch gaps inside optimizer.step left out (a graph of the "
                    "model does not capture the optimizer: fused_optimizer)")
    if len(rows) > 1:
        rows.sort(key=lambda x: -x["saving_us"])
    per_step = gaps_total / (scope.steps * scope.ranks)
    title = (f"Capture the step in a CUDA graph (torch.compile mode=\"reduce-overhead\"): the GPU waits "
             f"{fmt_us(per_step)} per step for kernel launches in the profiled run")
    if not n_graphed and any(reduce_overhead_calls(r) is not None for r in analysis.ranks):
        title = (f"Compile with mode=\"reduce-overhead\": CUDA graphs of the step's torch.compile graphs (the eager "
                 f"code around them stays as it is); the GPU waits {fmt_us(per_step)} per step for kernel launches "
                 "in the profiled run")
        mutation = input_mutation_kernel(analysis)
        if mutation:
            title += (f". If it is compiled so already, its graphs were skipped: the compiled kernel {mutation} writes "
                      "a graph input in place, which makes CUDA graph trees skip graphs (\"mutated inputs\"); compute "
                      "it out of place (x = (x - mean) / std), TORCH_LOGS=cudagraphs says why")
    helpers = compiled_helper_calls(analysis)
    if not n_graphed and helpers is not None and all(reduce_overhead_calls(r) is None for r in analysis.ranks):
        title = (f"Compile the model, not {helpers:.0f} helper calls per step, with mode=\"reduce-overhead\" (one CUDA "
                 f"graph of the step; each compiled helper now pays its guard check and wrapper between eager ops): "
                 f"the GPU waits {fmt_us(per_step)} per step for kernel launches in the profiled run")
    if n_graphed:
        title = (f"Capture the eager rest of the step in CUDA graphs ({n_graphed} GPU activities already replay "
                 f"from graphs): the GPU waits {fmt_us(per_step)} per step for its kernel launches in the profiled run")
    return suggestion("cuda_graphs", title, saving, scope, formula, rows, min_pct=CUDA_GRAPHS_MIN_PCT)


# Inductor names a kernel after the ops it fuses; an in-place write back to a graph input is a `copy_`
# among them ("triton_poi_fused_copy__div_sub_0": heldout25 traffic_rollout_compiled_inplace_norm's
# `x.sub_(mean).div_(std)`); `_to_copy` is a cast, not a write back
MUTATION_KERNEL = re.compile(r"^triton_\w*?fused_(?:\w+_)?(?<!_to_)copy__")


def input_mutation_kernel(analysis: Analysis) -> str | None:
    """The name of an Inductor kernel that writes a compiled graph's input back in place, on any rank."""
    for r in analysis.ranks:
        names = r.roofline.table["name"].astype(str).tolist() if len(r.roofline.table) else []
        found = next((n for n in names if MUTATION_KERNEL.match(n)), None)
        if found:
            return found
    return None


def compiled_helper_calls(analysis: Analysis) -> float | None:
    """Compiled regions per headline step when they are at least HELPER_REGIONS_MIN and none holds
    another (no graph break: patterns.graph_breaks is empty), on the first rank that has them: small
    functions compiled one by one and called from eager code. None otherwise."""
    for r, table in rank_tables(analysis, "compiled"):
        t = table[in_headline(r, table[cd.CR_STEP].to_numpy())]
        breaks = r.patterns.graph_breaks if r.patterns is not None else None
        if not len(t) or (breaks is not None and len(breaks)):
            continue
        per = float(t[cd.CR_REGIONS].sum()) / max(Scope.of(analysis).steps, 1)
        return per if per >= HELPER_REGIONS_MIN else None
    return None


def reduce_overhead_calls(r: RankAnalysis) -> np.ndarray | None:
    """Per rank.runtime row, the calls inside torch.compile's graphs when they are at least
    COMPILED_CALLS_SHARE of the rank's runtime calls and no kernel replays from a CUDA graph: the change
    is then mode="reduce-overhead" on the compiled functions, which graphs those calls and leaves the
    eager code around them as it is (suggestions/whatif.py). A replay adds no host work to price: the
    what-if keeps the compiled call's Python before its first launch, and a reduce-overhead call costs
    no more than that (fixed 32–33 µs a call against default mode's 35–37 µs, least squares over chains
    of 4, 16 and 64 kernels: docs/measurements/graph_tree_cost_h100.txt). None otherwise."""
    p = r.patterns
    inside = p.in_compiled_graph if p is not None else None
    if inside is None or not len(inside) or inside.mean() < COMPILED_CALLS_SHARE:
        return None
    if r.graphs is not None and r.graphs.replayed.any():
        return None
    return inside


def optimizer_rows(r: RankAnalysis) -> np.ndarray | None:
    """Per rank.gpu row: launched by the optimizer, in an Optimizer.step range or by a hand-written
    optimizer loop (patterns.in_optimizer_loop); None without patterns."""
    p = r.patterns
    if p is None:
        return None
    if len(p.in_optimizer_loop) == len(p.in_optimizer):
        return p.in_optimizer | p.in_optimizer_loop
    return p.in_optimizer if len(p.in_optimizer) else p.in_optimizer_loop


def launch_limited(verdict: str, cause: str | None) -> bool:
    """Launch-bound, or mixed with launch waits among its two largest causes."""
    return verdict == LAUNCH_BOUND or (verdict == MIXED and "launch" in (cause or "").split("+"))


def _batched_estimate(row: dict[str, Any], num_sms: int | None, device: Device | None) -> tuple[float, str]:
    """Time of one batched kernel doing one loop run's work, and how it was estimated."""
    n = row[sequences.LP_PER_RUN]
    one = row[sequences.LP_KERNEL_US]
    blocks = row[sequences.LP_BLOCKS]
    if num_sms and blocks > 0:
        waves = max(math.ceil(n * blocks / num_sms), 1)
        how = f"⌈{n:.0f} GEMMs × {blocks:.0f} blocks / {num_sms} SMs⌉ = {waves} wave(s) × {fmt_us(one)}"
    else:
        waves = int(n)
        how = f"{waves} waves (SM count or grid unknown) × {fmt_us(one)}"
    est = waves * one
    if device is not None:
        runs = max(row[sequences.LP_RUNS], 1)
        precision, _ = roof_for("gemm", row[sequences.LP_DTYPE], str(row[sequences.LP_NAME] or ""), device)
        peak = device.peak_flops(precision) if precision else None
        floor = 0.0
        if peak and not math.isnan(row[sequences.LP_FLOPS]):
            floor = max(floor, row[sequences.LP_FLOPS] / runs / peak * 1e6)
        if not math.isnan(row[sequences.LP_BYTES]):
            floor = max(floor, row[sequences.LP_BYTES] / runs / device.memory_bandwidth * 1e6)
        if floor > est:
            est, how = floor, f"roofline time of one run's FLOPs/bytes = {fmt_us(floor)}"
    return est, how


def batch_bmm(analysis: Analysis) -> Suggestion | None:
    """Loops of same-shape GEMMs: loop wall time − one batched kernel's time, per loop run; and
    ensembles called member by member (patterns.ensembles): k members' host time × (1 − 1/k), the
    batched layers priced by the what-if at their roof for k× the work."""
    scope = Scope.of(analysis)
    rows, parts, total = [], [], 0.0
    for r, table in rank_tables(analysis, "loops"):
        num_sms = r.patterns.num_sms
        for row in table.to_dict("records"):
            fills = bool(num_sms) and row[sequences.LP_BLOCKS] >= num_sms
            if fills or row[sequences.LP_BUSY_US] >= LOOP_BUSY_SHARE * row[sequences.LP_WALL_US]:
                continue  # each GEMM already fills the GPU, or the loop keeps it busy
            est, how = _batched_estimate(row, num_sms, analysis.device)
            runs = row[sequences.LP_RUNS]
            saving = max(row[sequences.LP_WALL_US] - runs * est, 0.0)
            if saving <= 0:
                continue
            total += saving
            parts.append(f"{fmt_us(row[sequences.LP_WALL_US])} − {runs} run(s) × {fmt_us(est)} [{how}]")
            rows.append({"rank": r.rank, "kernel": row[sequences.LP_NAME], "op": row[sequences.LP_OP],
                         "shapes": row[sequences.LP_SHAPES], "dtype": row[sequences.LP_DTYPE], "runs": runs,
                         "gemms_per_run": row[sequences.LP_PER_RUN], "kernel_us": row[sequences.LP_KERNEL_US],
                         "loop_wall_us": row[sequences.LP_WALL_US] / runs, "batched_us": est,
                         "saving_us": saving})
    members = ensemble_rows(analysis)
    if not rows and not members:
        return None
    total += sum(x["saving_us"] for x in members)
    saving = total / scope.ranks
    gemms = sum(x["runs"] * x["gemms_per_run"] for x in rows)
    formula = ("loop wall time (first GEMM start to last GEMM end) − one batched kernel per run: "
               + "; ".join(parts[:4]) + (f"; … {len(parts) - 4} more" if len(parts) > 4 else "")) if rows else ""
    title = (f"Batch {gemms:.0f} same-shape GEMMs issued back to back in loops into torch.bmm "
             f"({len(rows)} loop signature(s))")
    if members:
        k = max(x["members"] for x in members)
        fwd = next((x for x in members if x["direction"] == ensembles.FORWARD), members[0])
        launched = sum(x["launches_per_member"] for x in members)
        formula = "; ".join(f for f in (formula, (
            f"{'attention heads' if fwd.get('stack') == ensembles.KIND_HEADS else 'ensemble'} of {k:.0f} members "
            f"called one by one: per direction, the members' host time (first "
            f"member's start to last one's end) × (1 − 1/{k:.0f}) = "
            + " + ".join(f"{fmt_us(x['host_us_per_step'])} × {1 - 1 / x['members']:.3f} ({x['direction']})"
                         for x in members)
            + f" per step as traced; the what-if keeps one member's {launched} launches (per stretch) and runs each kernel "
            f"at max(its time, its roof for {k:.0f}× the work) / {k:.0f}"
            + (", the kernels on the heads' shared input (its cast, the sum of its input gradients) once"
               if fwd.get("stack") == ensembles.KIND_HEADS else ""))) if f)
        title = (f"Stack the {k:.0f} attention heads' weights into one projection and one attention call: each "
                 f"step calls {k:.0f} head modules in turn on one input ({fwd['ops']}, input {fwd['first']}), "
                 f"each with its own narrow q/k/v Linear{' and single-head SDPA' if 'attention' in str(fwd['ops']) else ''}, "
                 f"{sum(x['gemms_per_step'] for x in members):.0f} GEMMs and "
                 f"{fmt_us(sum(x['host_us_per_step'] for x in members))} of host time per step, forward and backward; "
                 f"one Linear(d, 3·d) and one scaled_dot_product_attention over (B, heads, T, head_dim) "
                 f"(or nn.MultiheadAttention) do each layer's heads at once") if fwd.get("stack") == ensembles.KIND_HEADS \
            else (f"Stack the {k:.0f} ensemble members' weights and run each layer once for all of them "
                 f"(torch.func.stack_module_state + torch.vmap, or one torch.bmm/baddbmm per layer): each step "
                 f"calls the same layers ({fwd['ops']}, input {fwd['first']}) {k:.0f} times with other weights, "
                 f"{sum(x['gemms_per_step'] for x in members):.0f} GEMMs and "
                 f"{fmt_us(sum(x['host_us_per_step'] for x in members))} of host time per step, "
                 + ("forward and backward" if any(x["direction"] != ensembles.FORWARD for x in members) else
                    f"forward only, their {k:.0f} outputs stacked (one model over {k:.0f} chunks of a batch: run it "
                    "once on the whole batch)"))
    # an ensemble alone: silent below 2 % of the step as traced too (the priced list's floor)
    floor = SILENT_BELOW_PCT if members and not rows else MIN_SAVING_PCT
    return suggestion("batch_bmm", title, saving, scope, f"{formula} = {fmt_us(saving)}", rows + members,
                      min_pct=floor)
