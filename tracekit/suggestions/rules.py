"""The rule tables (one row per rule: id, check, snippet, diff target, --try knobs, inputs) and `suggest`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tracekit.analyzers import step_parts
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.isolate import attempt
from tracekit.analyzers.operators import BY_MODULE, where_launched
from tracekit.analyzers.ranks import CrossRank
from tracekit.analyzers.step_parts import StepPart
from tracekit.model.outlook import RankModel
from tracekit.suggestions import (
    rules_align,
    rules_attention,
    rules_batching,
    rules_cache,
    rules_compile,
    rules_conv,
    rules_convert,
    rules_debug,
    rules_decode,
    rules_expand,
    rules_fields,
    rules_grid,
    rules_host,
    rules_int4,
    rules_kernels,
    rules_launch,
    rules_leftover,
    rules_llm,
    rules_loader,
    rules_loops,
    rules_memory,
    rules_offload,
    rules_optimizer,
    rules_pairs,
    rules_precision,
    rules_python,
    rules_ranks,
    rules_rebuild,
    rules_recompute,
    rules_sparse,
    rules_tables,
    rules_triton,
)
from tracekit.suggestions.common import SILENT_BELOW_PCT
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rule_targets import COLUMN_TARGETS
from tracekit.suggestions.rule_waits import WAIT_FOR_READS, WAITS_FOR
from tracekit.suggestions.snippets import SNIPPETS
from tracekit.suggestions.whatif import price


@dataclass(frozen=True)
class Rule:
    """One rule over an `Analysis`, everything about it in one row.

    `check` finds the problem (a Suggestion without its snippet, or None; one with its own snippet
    when the problem has a variant this row's does not cover); `snippet` is the code the
    suggestion shows; `target` the part of the step the change acts on (what `tracekit diff`
    measures before and after); `knobs` the `tracekit profile --try` knobs that apply the change
    (names in tracekit.profile.knobs.KNOBS); `reads` the analyzer results the check reads, as
    `Analysis` / `RankAnalysis` fields ("patterns.loops": a field of that field), besides the
    `totals` and `ranks` every rule's Scope reads.
    """

    id: str
    check: Callable[[Analysis], Suggestion | None]
    snippet: str
    target: StepPart
    knobs: tuple[str, ...]
    reads: tuple[str, ...]

    def run(self, analysis: Analysis) -> Suggestion | None:
        """The check's suggestion with this row's snippet, or None."""
        found = self.check(analysis)
        return None if found is None else dataclasses.replace(found, snippet=found.snippet or self.snippet)


@dataclass(frozen=True)
class CrossRankRule:
    """One rule over the cross-rank view of a multi-rank run (`reads`: CrossRank fields)."""

    id: str
    check: Callable[[CrossRank], Suggestion | None]
    snippet: str
    reads: tuple[str, ...]

    def run(self, view: CrossRank) -> Suggestion | None:
        """The check's suggestion with this row's snippet, or None."""
        found = self.check(view)
        return None if found is None else dataclasses.replace(found, snippet=found.snippet or self.snippet)


# In report order (ties of equal savings keep it); a knob's first row is the one `--try` names
# when none of its rules fired.
RULES: tuple[Rule, ...] = (
    Rule("cuda_graphs", rules_launch.cuda_graphs, SNIPPETS["cuda_graphs"],
         StepPart("GPU idle time (launch gaps)", step_parts.gpu_idle), ("cudagraphs",),
         ("totals", "launch", "graphs")),
    Rule("fuse_elementwise", rules_kernels.fuse_elementwise, SNIPPETS["fuse_elementwise"],
         StepPart("elementwise + normalization time", step_parts.elementwise_time), ("compile",),
         ("device", "launch", "patterns.chains")),
    Rule("batch_bmm", rules_launch.batch_bmm, SNIPPETS["batch_bmm"],
         StepPart("the same-shape GEMM loop", step_parts.gemm_loop), (),
         ("device", "patterns.loops", "patterns.num_sms")),
    Rule("batch_decode", rules_decode.batch_decode, SNIPPETS["batch_decode"],
         step_parts.WHOLE_STEP, (), ("device", "kernels", "patterns.training")),
    Rule("batch_requests", rules_batching.batch_requests, SNIPPETS["batch_requests"],
         step_parts.WHOLE_STEP, (), ("device", "patterns.requests", "patterns.in_requests", "patterns.training")),
    Rule("batch_samples", rules_memory.samples_or_gradients, SNIPPETS["batch_samples"],
         StepPart("the per-sample loop (its host time)", step_parts.sample_loop_time), (),
         ("device", "patterns.sample_loops", "patterns.sample_sizes", "patterns.sample_gpu_us")),
    Rule("foreach_loops", rules_batching.foreach_loops, SNIPPETS["foreach_loops"],
         StepPart("the per-tensor loops outside the optimizer (their CPU time)", step_parts.foreach_loop_time), (),
         ("patterns.foreach_loops", "patterns.foreach_calls")),
    Rule("lower_precision", rules_precision.lower_precision, SNIPPETS["lower_precision"],
         StepPart("GEMM + convolution + normalization time", step_parts.precision_time), ("tf32", "bf16"),
         ("device", "kernels", "patterns.sdpa_fallback")),
    Rule("align_dims", rules_align.align_dims, SNIPPETS["align_dims"],
         step_parts.WHOLE_STEP, (), ("device", "kernels")),
    Rule("use_sdpa", rules_kernels.use_sdpa, SNIPPETS["use_sdpa"],
         StepPart("the attention chain (scores GEMM → softmax → GEMM and its backward, an SDPA fallback's kernels, or the fused kernel)",
                  step_parts.attention_chain), (), ("device", "patterns.attention", "patterns.sdpa_fallback")),
    Rule("avoid_sync", rules_host.avoid_sync, SNIPPETS["avoid_sync"],
         StepPart("GPU idle after host syncs", step_parts.total("sync_wait_us")), (),
         ("launch", "patterns.syncs", "patterns.sync_in_loop", "patterns.sync_in_anomaly")),
    Rule("reuse_dataloader", rules_loader.reuse_dataloader, SNIPPETS["reuse_dataloader"],
         StepPart("GPU idle while the main thread loads data", step_parts.total("data_wait_us")),
         (), ("launch", "patterns.loader_respawn")),
    Rule("dataloader_workers", rules_host.dataloader_workers, SNIPPETS["dataloader_workers"],
         StepPart("GPU idle while the main thread loads data", step_parts.total("data_wait_us")),
         ("dataloader",), ("launch", "patterns.dataloader")),
    Rule("preprocess_off_thread", rules_python.preprocess_off_thread, SNIPPETS["preprocess_off_thread"],
         StepPart("GPU idle while the CPU works between launches (long host gaps)",
                  step_parts.total("cpu_wait_us")), (), ("launch", "patterns.host_gaps")),
    Rule("pinned_memory", rules_host.pinned_memory, SNIPPETS["pinned_memory"],
         StepPart("copy time + GPU idle while the CPU is blocked in copies", step_parts.copies),
         ("dataloader",), ("device", "launch", "patterns.copies", "patterns.syncs")),
    Rule("fused_optimizer", rules_optimizer.fused_optimizer, SNIPPETS["fused_optimizer"],
         StepPart("the optimizer step (Optimizer.step ranges)", step_parts.optimizer_time), (),
         ("device", "patterns.optimizer")),
    Rule("optimizer_on_gpu", rules_offload.optimizer_on_gpu, SNIPPETS["optimizer_on_gpu"],
         StepPart("the optimizer's host step and its gradient/weight copy calls", step_parts.offload_time), (),
         ("device", "memory", "patterns.offload", "patterns.offload_copies", "patterns.offload_calls",
          "patterns.offload_thread")),
    Rule("overlap_comm", rules_host.overlap_comm, SNIPPETS["overlap_comm"],
         StepPart("exposed communication", step_parts.total("comm_exposed_us")), (),
         ("launch", "patterns.comm")),
    Rule("causal_mask", rules_attention.causal_mask, SNIPPETS["causal_mask"],
         StepPart("attention kernel time (fused SDPA kernels) + the mask built every step (host time, copies, kernels)",
                  step_parts.causal_mask_time), (),
         ("device", "patterns.masked_attention", "patterns.mask_builds", "patterns.in_mask_build",
          "patterns.mask_build_thread")),
    Rule("channels_last", rules_precision.channels_last, SNIPPETS["channels_last"],
         StepPart("cuDNN NCHW ↔ NHWC transpose time", step_parts.layout_transposes), (),
         ("kernels", "patterns.layout_transposes")),
    Rule("quantize_weights", rules_decode.quantize_weights, SNIPPETS["quantize_weights"],
         StepPart("GEMM time", step_parts.gemm_time), (), ("device", "kernels", "patterns.training")),
    Rule("int4_large_batch", rules_int4.int4_large_batch, SNIPPETS["int4_large_batch"],
         StepPart("GEMM time", step_parts.gemm_time), (), ("device", "kernels")),
    Rule("fused_llm_kernels", rules_llm.fused_llm_kernels, SNIPPETS["fused_llm_kernels"],
         StepPart("unfused RMSNorm / SwiGLU / RoPE / cross-entropy chain time", step_parts.llm_chain_time), (),
         ("patterns.llm_chains", "patterns.in_llm_chain")),
    Rule("graph_breaks", rules_compile.graph_breaks, SNIPPETS["graph_breaks"],
         StepPart("host time between compiled graphs at graph breaks", step_parts.graph_break_time), (),
         ("patterns.compiled", "patterns.graph_breaks")),
    Rule("recompiles", rules_compile.recompiles, SNIPPETS["recompiles"],
         StepPart("Dynamo's frame compiles inside the steps", step_parts.recompile_time), (),
         ("patterns.recompiles",)),
    Rule("cudnn_rnn", rules_loops.cudnn_rnn, SNIPPETS["cudnn_rnn"],
         StepPart("kernel time of the RNN cell loops (forward and backward)", step_parts.rnn_loop_time), (),
         ("device", "patterns.rnn_cells", "patterns.rnn_rows")),
    Rule("concat_embeddings", rules_loops.concat_embeddings, SNIPPETS["concat_embeddings"],
         StepPart("embedding lookup kernel time (forward and backward)", step_parts.embedding_lookup_time), (),
         ("device", "patterns.embedding_lookups", "patterns.embedding_rows")),
    Rule("preallocate_kv_cache", rules_cache.preallocate_kv_cache, SNIPPETS["preallocate_kv_cache"],
         StepPart("copy kernels of the torch.cat calls that grow a cache", step_parts.cache_growth_time), (),
         ("patterns.cache_growth", "patterns.in_cache_growth")),
    Rule("use_kv_cache", rules_cache.use_kv_cache, SNIPPETS["use_kv_cache"], step_parts.WHOLE_STEP, (),
         ("device", "patterns.generation", "patterns.generation_share", "patterns.generation_gpu_us",
          "patterns.training")),
    Rule("convert_weights_once", rules_convert.convert_weights_once, SNIPPETS["convert_weights_once"],
         StepPart("kernels of the weight conversions done every GEMM call", step_parts.weight_convert_time), (),
         ("patterns.training", "patterns.weight_converts", "patterns.weight_convert_calls",
          "patterns.weight_consumers")),
    Rule("drop_checkpointing", rules_recompute.drop_checkpointing, SNIPPETS["drop_checkpointing"],
         StepPart("kernels of the forwards re-run in backward (activation checkpointing)",
                  step_parts.recompute_time), (),
         ("memory", "patterns.recompute", "patterns.recompute_calls")),
    Rule("larger_batch", rules_memory.larger_batch, SNIPPETS["larger_batch"], step_parts.WHOLE_STEP, (),
         ("memory", "launch", "device", "patterns.accumulation", "patterns.in_accumulation")),
    Rule("anomaly_mode", rules_debug.anomaly_mode, SNIPPETS["anomaly_mode"],
         StepPart("anomaly mode's host time (backward NaN checks + forward stack capture)", step_parts.anomaly_time),
         (), ("patterns.anomaly", "patterns.debug_modes")),
    Rule("launch_blocking", rules_debug.launch_blocking, SNIPPETS["launch_blocking"],
         StepPart("host time kernel launches wait for their kernel (past a normal launch)", step_parts.launch_wait_time),
         (), ("patterns.launch_blocking", "patterns.debug_modes")),
    Rule("empty_cache", rules_debug.empty_cache, SNIPPETS["empty_cache"],
         StepPart("cudaFree + cudaMalloc call time", step_parts.cache_release_time), (),
         ("patterns.cleanup", "patterns.gc_recorded")),
    Rule("gc_collect", rules_debug.gc_collect, SNIPPETS["gc_collect"],
         StepPart("recorded garbage-collection pauses", step_parts.gc_time), (),
         ("patterns.cleanup", "patterns.gc_recorded")),
    Rule("triton_config", rules_triton.triton_config, SNIPPETS["triton_config"],
         StepPart("user Triton kernel time", step_parts.user_triton_time), (),
         ("kernels", "patterns.triton_launches")),
    Rule("fuse_triton_passes", rules_triton.fuse_triton_passes, SNIPPETS["fuse_triton_passes"],
         COLUMN_TARGETS["fuse_triton_passes"], (), ("patterns.triton_passes", "patterns.triton_pass_calls")),
    Rule("soa_layout", rules_fields.soa_layout, SNIPPETS["soa_layout"], COLUMN_TARGETS["soa_layout"], (),
         ("device", "patterns.strided_reads", "patterns.read_stride")),
    Rule("merge_launches", rules_grid.merge_launches, SNIPPETS["merge_launches"],
         StepPart("kernel time of the launches that fill a fraction of the SMs", step_parts.underfilled_time), (),
         ("patterns.underfilled", "patterns.num_sms")),
    Rule("enable_gqa", rules_attention.enable_gqa, SNIPPETS["enable_gqa"],
         StepPart("K/V expansion copies + the attention kernels they feed", step_parts.gqa_expand_time), (),
         ("patterns.gqa_expand",)),
    Rule("last_logits", rules_llm.last_logits, SNIPPETS["last_logits"],
         StepPart("the vocabulary projection and the ops on the whole logits", step_parts.full_logits_time), (),
         ("patterns.full_logits", "patterns.training")),
    Rule("freeze_params", rules_optimizer.freeze_params, SNIPPETS["freeze_params"],
         StepPart("backward's GPU work past the last gradient the optimizer reads", step_parts.frozen_backward_time), (),
         ("patterns.frozen_grads",)),
    Rule("grads_to_none", rules_optimizer.grads_to_none, SNIPPETS["grads_to_none"], COLUMN_TARGETS["grads_to_none"], (),
         ("patterns.zeroed_grads", "patterns.zeroed_grad_calls")),
    Rule("reduce_on_gpu", rules_host.reduce_on_gpu, SNIPPETS["reduce_on_gpu"], COLUMN_TARGETS["reduce_on_gpu"], (),
         ("patterns.host_reductions",)),
    Rule("static_graph_inputs", rules_compile.static_graph_inputs, SNIPPETS["static_graph_inputs"],
         COLUMN_TARGETS["static_graph_inputs"], (), ("patterns.graph_inputs", "patterns.graph_input_calls")),
    Rule("flatten_bmm", rules_expand.flatten_bmm, SNIPPETS["flatten_bmm"], COLUMN_TARGETS["flatten_bmm"], (),
         ("patterns.expanded_bmm", "patterns.expanded_part", "patterns.expanded_touched", "patterns.expanded_us",
          "patterns.expanded_step")),
    Rule("sparse_format", rules_sparse.sparse_format, SNIPPETS["sparse_format"], COLUMN_TARGETS["sparse_format"], (),
         ("patterns.sparse_products", "patterns.sparse_part", "patterns.sparse_call", "patterns.sparse_calls")),
    Rule("sparse_grads", rules_tables.sparse_grads, SNIPPETS["sparse_grads"], COLUMN_TARGETS["sparse_grads"], (),
         ("patterns.table_grads", "patterns.table_sweep")),
    Rule("weight_decay", rules_optimizer.weight_decay, SNIPPETS["weight_decay"],
         StepPart("the loss's L2 penalty: its forward and backward calls (their host time)", step_parts.l2_penalty_time), (),
         ("patterns.l2_penalty", "patterns.l2_penalty_calls")),
    Rule("single_backward", rules_recompute.single_backward, SNIPPETS["single_backward"],
         StepPart("GPU time of the weight layers' backward nodes in steps that run backward more than once",
                  step_parts.repeated_backward_time), (),
         ("patterns.backward_passes", "patterns.backward_factor")),
    Rule("use_conv2d", rules_conv.use_conv2d, SNIPPETS["use_conv2d"],
         StepPart("kernels of im2col convolutions a native one does not run (im2col/col2im, the columns' copies)",
                  step_parts.unfold_conv_time), (),
         ("patterns.unfold_conv", "patterns.in_unfold_conv")),
    Rule("autotune_once", rules_triton.autotune_once, SNIPPETS["autotune_once"],
         StepPart("Triton's autotuner benchmarking inside the steps (its windows' wall time)", step_parts.autotune_time), (),
         ("patterns.autotune", "patterns.autotune_calls")),
    Rule("distance_gemm", rules_conv.distance_gemm, SNIPPETS["distance_gemm"],
         StepPart("kernels of the broadcast-difference distance chains", step_parts.broadcast_distance_time), (),
         ("device", "patterns.broadcast_distance", "patterns.in_broadcast_distance")),
    Rule("filled_cache", rules_attention.filled_cache, SNIPPETS["filled_cache"],
         StepPart("kernels of the decoding attention calls over the whole static cache", step_parts.static_cache_time), (),
         ("patterns.static_cache", "patterns.static_cache_share", "patterns.static_cache_calls")),
    Rule("read_once", rules_host.read_once, SNIPPETS["read_once"],
         StepPart("host time of the per-item read loops after their first item", step_parts.item_reads_time), (),
         ("patterns.item_reads", "patterns.item_read_calls")),
    Rule("drop_checks", rules_host.drop_checks, SNIPPETS["drop_checks"],
         StepPart("host time of the value checks read on the host", step_parts.value_checks_time), (),
         ("patterns.value_checks", "patterns.value_check_calls")),
    Rule("calibration_off", rules_leftover.calibration_off, SNIPPETS["calibration_off"], COLUMN_TARGETS["calibration_off"], (),
         ("patterns.calibration", "patterns.calibration_calls")),
    Rule("remove_weight_norm", rules_leftover.remove_weight_norm, SNIPPETS["remove_weight_norm"], COLUMN_TARGETS["remove_weight_norm"], (),
         ("patterns.weight_norm", "patterns.weight_norm_calls")),
    Rule("ring_buffer_cache", rules_cache.ring_buffer_cache, SNIPPETS["ring_buffer_cache"], COLUMN_TARGETS["ring_buffer_cache"], (),
         ("patterns.window_shift", "patterns.window_shift_calls")),
    Rule("split_pair_linear", rules_pairs.split_pair_linear, SNIPPETS["split_pair_linear"], COLUMN_TARGETS["split_pair_linear"], (),
         ("device", "patterns.pair_concat", "patterns.in_pair_concat")),
    Rule("inference_mode", rules_leftover.inference_mode, SNIPPETS["inference_mode"], COLUMN_TARGETS["inference_mode"], (),
         ("patterns.grad_recording", "patterns.grad_recording_cut_us")),
    Rule("define_kernel_once", rules_rebuild.define_kernel_once, SNIPPETS["define_kernel_once"], COLUMN_TARGETS["define_kernel_once"], (),
         ("patterns.triton_rebuild", "patterns.triton_rebuild_cut_us")),
    Rule("attention_plans", rules_rebuild.attention_plans, SNIPPETS["attention_plans"], COLUMN_TARGETS["attention_plans"], (),
         ("patterns.attention_plans", "patterns.attention_plan_cut_us")),
)
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}

CROSS_RANK_RULES: tuple[CrossRankRule, ...] = (
    CrossRankRule("rank_imbalance", rules_ranks.rank_imbalance, SNIPPETS["rank_imbalance"],
                  ("ranks", "steps", "stragglers", "span_us")),
)


def knob_rules(knob: str) -> tuple[Rule, ...]:
    """The rows whose change the `--try` knob `knob` applies, in RULES order."""
    return tuple(rule for rule in RULES if knob in rule.knobs)


def suggest(analysis: Analysis, rules: Sequence[Rule] | None = None,
            models: Sequence[RankModel] = ()) -> list[Suggestion]:
    """Every rule's suggestion for `analysis` (tracekit.analyzers.analyze's result), largest
    estimated saving first (ties keep the RULES order). With the ranks' execution `models`, each
    saving is the what-if replay of the change on the projected unprofiled steps where the model
    projects (suggestions/whatif.py), and a combined what-if of the top suggestions follows them. A
    suggestion that WAITS_FOR another that fired is left out. Empty when the integrity audit found an
    error: a trace that cannot support a verdict cannot price a change either."""
    return suggest_checked(analysis, rules, models)[0]


def suggest_checked(analysis: Analysis, rules: Sequence[Rule] | None = None,
                    models: Sequence[RankModel] = ()) -> tuple[list[Suggestion], tuple[str, ...]]:
    """(suggest's list, a warning per part a tracekit bug left out: a rule that raised, the pricing);
    no rule runs where a rank's pattern detectors failed (analyzers/isolate.py)."""
    audit = analysis.integrity
    if audit is not None and audit.errors:
        return [], ()  # the trace cannot support a verdict (tracekit.analyzers.integrity): nor a saving
    if any(r.failures for r in analysis.ranks):
        return [], ()  # the rules read the patterns; the rank's warning says they are missing
    failed: list[str] = []

    def run(rule: Rule) -> Suggestion | None:
        found, note = attempt(f"rule `{rule.id}`", lambda: rule.run(analysis), lambda: None, "its suggestion is left out")
        if note:
            failed.append(note)
        return found

    checked = [s for rule in (RULES if rules is None else rules) if (s := run(rule)) is not None]

    def priced(found: list[Suggestion]) -> list[Suggestion]:
        out, note = attempt("the what-if pricing", lambda: _priced(analysis, found, models),
                            lambda: [s for s in found if s.saving_pct >= SILENT_BELOW_PCT],
                            "the savings are the traced estimates, not what-if replays")
        if note:
            failed.append(note)
        return out

    found = priced(checked)
    fired = {s.id for s in found}
    held = {s.id for s in found if fired.intersection(WAITS_FOR.get(s.id, ()))}
    if any(s.id == "avoid_sync" and rules_host.reads_split_step(s) for s in found):
        held |= fired.intersection(WAIT_FOR_READS)
    if held:  # price again without them (the combined savings)
        found = priced([s for s in checked if s.id not in held])

    def place(s: Suggestion) -> Suggestion:
        return attempt("locating a suggestion's source line", lambda: located(analysis, s), lambda: s,
                       "its source line is not shown")[0]

    placed = [place(s) for s in found]
    return sorted(placed, key=lambda s: -s.saving_us), tuple(dict.fromkeys(failed))


def located(analysis: Analysis, s: Suggestion) -> Suggestion:
    """`s` with `where`: the source line (or module) that launched most of its evidence kernels' GPU
    time, from the operator view of the traces recorded with stacks ('model.py:88 attention launches
    60 % of them'); `s` unchanged without stacks or kernel names in its evidence."""
    kernels = [str(row["kernel"]) for row in s.evidence if isinstance(row.get("kernel"), str)]
    ops = [op.strip() for row in s.evidence for op in str(row.get("ops") or row.get("op") or "").split("→")]
    views = [v for r in analysis.ranks for v in r.operators]
    found = where_launched(views, kernels, ops) if (kernels or any(ops)) and views else None
    if found is None:
        return s
    key, share = found
    where = f"{key} launches {100 * share:.0f} % of the GPU time of these " + ("kernels" if kernels else "ops")
    module = where_launched(views, kernels, ops, groupings=(BY_MODULE,))
    if module is not None and module[0] != key:  # the line is a call site; the module narrows it down
        where += f"; module {module[0]}: {100 * module[1]:.0f} %"
    return dataclasses.replace(s, where=where)


def _priced(analysis: Analysis, found: list[Suggestion], models: Sequence[RankModel]) -> list[Suggestion]:
    if models and any(m.trusted for m in models):
        return price(analysis, found, models)  # silent below SILENT_BELOW_PCT of the projected step
    if models:
        return [s for s in found if s.saving_pct >= SILENT_BELOW_PCT]
    return found


def suggest_cross_rank(view: CrossRank) -> list[Suggestion]:
    """Every cross-rank rule's suggestion for `view`, largest estimated saving first."""
    found = [s for rule in CROSS_RANK_RULES if (s := rule.run(view)) is not None]
    return sorted(found, key=lambda s: -s.saving_us)
