"""Checks made on every trace that test_invariants loads (each sample and shared trace loaded once for
all of them): the model's trust gate (trusted, or abstaining for a listed reason) and kernel
classification (at most 2 % of GPU time unclassified). The traces test_invariants does not load keep
these checks in test_model_samples.py and test_kernels_shared.py."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import SAMPLE_TRACES, SHARED_TRACES

from tracekit.analyzers.kernels import CLASS, OTHER, classify
from tracekit.analyzers.step_plan import plan_steps
from tracekit.model import FIDELITY_LIMIT, fidelity
from tracekit.trace.model import RankTrace, Trace

NO_GPU = "no GPU activity"
INFERRED = "no ProfilerStep marks"
# 13 % since queued launches follow their stream (model/graph.py QUEUED_US); before, 10 % with 11 % late
UNNAMED_WAITS = "replay 13% off: "
# Where the model abstains, and why (the start of its one-line reason); every other trace must be trusted.
# heldout10 sinkhorn_check's CUDA-graph variant (H100): 10 replays a step of a ~240-kernel graph whose
# kernels start up to ~0.7 ms after their replay's launch on an idle stream (queued inside the graph)
GRAPH_QUEUED = "replay 19% off: "
SAMPLE_ABSTAINS = {"cpu_train_transformer.trace.json.gz": NO_GPU,
                   "heldout10/ho10_sinkhorn_check_cuda_graph.trace.json.gz": GRAPH_QUEUED,
                   # torch.ao's dynamic int8 Linears run on the host: no kernel, memcpy or memset event
                   "heldout24/ho24_support_ticket_cpu_dynamic_int8.trace.json.gz": NO_GPU}
SHARED_ABSTAINS = {
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": NO_GPU,
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": NO_GPU,  # counters only
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": NO_GPU,
    "hta/mixed_files/rank_non_gpu.json.gz": NO_GPU,
    "tracelens/b200/eager_trace.json.gz": INFERRED,
    "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz": INFERRED,
    "tracelens/inference/xdit_flux.1_aiter_sage/capture_traces/capture_trace_rank_0.json.gz": INFERRED,
    "tracelens/perf_model_normalization_normalization_layer_test.json.gz": INFERRED,
    # activation checkpointing on MI300X: kernels on idle streams wait for work on other streams
    "tracelens/mi300/resnet_act_checkpoint.json.gz": UNNAMED_WAITS,
}
TARGET_OTHER = 0.02  # at most 2 % of GPU time may stay unclassified


def expected_abstention(path: Path) -> str | None:
    """The start of the gate's reason where the model must abstain on `path`, else None (trusted)."""
    if path.is_relative_to(SAMPLE_TRACES):
        return SAMPLE_ABSTAINS.get(str(path.relative_to(SAMPLE_TRACES)))
    if path.is_relative_to(SHARED_TRACES):
        return SHARED_ABSTAINS.get(str(path.relative_to(SHARED_TRACES)))
    return None


def check_gate(trace: Trace, expected: str | None) -> None:
    """Every rank's gate: trusted with the replay within FIDELITY_LIMIT over every selected step, or
    abstaining with a reason that starts with `expected`."""
    for rank in trace.ranks.values():
        plan = plan_steps(rank)
        gate = fidelity(rank, plan)
        if expected is None:
            assert gate.trusted, f"{trace.path} rank {rank.rank}: {gate.reason}"
            assert gate.median_error <= FIDELITY_LIMIT and gate.steps == int(plan.selected.sum())
            assert gate.reason == ""
        else:
            assert not gate.trusted and gate.reason.startswith(expected), gate.reason


def user_triton_names(rank: RankTrace) -> set[str]:
    """Names of the user Triton kernels `tracekit profile` recorded (meta.tracekit triton_kernels)."""
    table = (rank.meta.tracekit or {}).get("triton_kernels")
    if isinstance(table, str):  # older recordings kept it as text
        return set(re.findall(r"'name': '([^']+)'", table))
    return {str(e.get("name")) for e in table or () if isinstance(e, dict)}


def check_other_share(trace: Trace) -> None:
    """At most TARGET_OTHER of GPU time unclassified, besides user Triton kernels whose name says
    nothing of their work (heldout6 `seg_kernel`, a segmented row sum, and `varlen_kernel`: a name is
    all a trace keeps of a user kernel), which stay `other` rather than guessed; they are counted apart
    and must be user kernels tracekit recorded."""
    for rank in trace.ranks.values():
        kc = classify(rank)
        assert len(kc.table) == len(rank.gpu)
        other = (kc.table[CLASS] == OTHER).to_numpy()
        user = rank.gpu["name"].isin(user_triton_names(rank)).to_numpy()
        dur = rank.gpu["dur"].to_numpy(dtype=float)
        share = float(dur[other & ~user].sum()) / kc.total_us if kc.total_us else 0.0
        assert share <= TARGET_OTHER, kc.classes
