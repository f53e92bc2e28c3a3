"""The suggestions engine as a whole: Suggestion, RULES, suggest(), the analyze --json field, real traces."""

from __future__ import annotations

import json
import math

import pytest
from conftest import shared_trace_files
from test_suggestions_host import loader_trace

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.step_parts import WHOLE_STEP
from tracekit.cli import main
from tracekit.suggestions import CROSS_RANK_RULES, RULES, Rule, Suggestion, suggest
from tracekit.suggestions.common import Scope, gemm_dims, suggestion
from tracekit.suggestions.rules import RULES_BY_ID

# The ids of the rules shipped in tracekit.analysis/1 documents so far: they keep their names and their
# relative order (a new rule is one row anywhere in RULES, and does not touch this list).
RULE_IDS = ["cuda_graphs", "fuse_elementwise", "batch_bmm", "batch_decode", "lower_precision", "align_dims",
            "use_sdpa", "avoid_sync", "dataloader_workers", "pinned_memory", "overlap_comm"]


def test_rule_ids_are_stable_and_ordered():
    ids = [r.id for r in RULES]
    assert [i for i in ids if i in RULE_IDS] == RULE_IDS
    assert len(set(ids)) == len(ids) and all(i.isidentifier() and i.islower() for i in ids)
    assert [r.id for r in CROSS_RANK_RULES] == ["rank_imbalance"]  # the cross-rank view's own list


def test_suggestion_to_dict_is_json_ready():
    s = Suggestion(id="x", title="t", saving_us=12.5, saving_pct=float("nan"), formula="a − b",
                   snippet="code", evidence=({"kernel": "k", "time_us": 3.0, "n": 2},), per_step_us=6.25,
                   basis="span")
    d = s.to_dict()
    assert d == {"id": "x", "title": "t", "saving_us": 12.5, "saving_pct": None, "per_step_us": 6.25,
                 "basis": "span", "traced_saving_us": None, "whatif": "", "combined_saving_us": None,
                 "formula": "a − b", "snippet": "code", "evidence": [{"kernel": "k", "time_us": 3.0, "n": 2}],
                 "where": ""}
    json.dumps(d, allow_nan=False)


def test_no_suggestion_without_evidence_or_below_threshold():
    scope = Scope(span_us=10000.0, steps=2, ranks=1)
    row = [{"step": 1}]
    assert suggestion("cuda_graphs", "t", 5000.0, scope, "f", []) is None  # no evidence
    assert suggestion("cuda_graphs", "t", 49.0, scope, "f", row) is None  # 0.49 % < 0.5 %
    s = suggestion("cuda_graphs", "t", 50.0, scope, "f", row)
    assert (s.saving_pct, s.per_step_us) == (0.5, 25.0)
    assert s.basis == "span of 2 steady steps (10.0 ms)"
    assert s.snippet == "" and "torch.cuda.CUDAGraph" in RULES_BY_ID["cuda_graphs"].snippet  # the row's


@pytest.mark.parametrize(("op", "shapes", "dims"), [
    ("aten::mm", ((1, 768), (768, 2304)), (1, 2304, 768)),
    ("aten::addmm", ((2304,), (32, 768), (768, 2304)), (32, 2304, 768)),
    ("aten::bmm", ((128, 2048, 64), (128, 64, 2048)), (2048, 2048, 64)),
    ("aten::linear", ((4, 16, 768), (3072, 768), (3072,)), (64, 3072, 768)),
    ("aten::matmul", ((4, 16, 768), (768, 50257)), (64, 50257, 768)),
    ("aten::mv", ((4096, 1024), (1024,)), (4096, 1, 1024)),
    ("aten::add", ((4, 4), (4, 4)), None),
    ("aten::mm", None, None),
])
def test_gemm_dims(op, shapes, dims):
    assert gemm_dims(op, shapes) == dims


def test_suggest_ranks_by_saving(tmp_path):
    a = analyze(tracekit.load_trace(loader_trace(tmp_path, 4000)))
    found = suggest(a)
    assert [s.id for s in found] == ["dataloader_workers"]
    assert suggest(a, rules=[r for r in RULES if r.id != "dataloader_workers"]) == []
    # rules listed smallest saving first, two with equal savings: suggest() puts the largest first
    # and keeps the list order between equals
    def fixed(name: str, us: float) -> Rule:
        made = Suggestion(id=name, title=name, saving_us=us, saving_pct=1.0, formula="", snippet="",
                          evidence=({"n": 1},))
        return Rule(name, lambda analysis: made, "", WHOLE_STEP, (), ())
    rules = [fixed("small", 1.0), fixed("tie_a", 5.0), fixed("big", 9.0), fixed("tie_b", 5.0)]
    assert [s.id for s in suggest(a, rules=rules)] == ["big", "tie_a", "tie_b", "small"]


def test_analyze_json_carries_suggestions(tmp_path, capsys):
    path = loader_trace(tmp_path, 4000)
    assert main(["analyze", str(path), "--json"]) in (0, None)
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["suggestions"]
    # The rule's traced estimate: the GPU is idle through both 4 ms loads. The saving is the what-if
    # replay (suggestions/whatif.py) on the projected steps, by hand: one launch call of 5 µs is the
    # fast launch, so each recorded CPU event costs 3.75 × (5 − 3.85) = 4.3125 µs (DEFAULT_OVERHEAD);
    # the 4020 µs gap before the launch holds 2 (the step mark and the DataLoader op): 4011.375 µs;
    # the launch keeps 3 µs (the floor), the 5975 µs tail to the step mark's end is kept: a projected
    # step of 9989.375 µs. Workers shorten that gap by the 4000 µs load, shrunk as the projection
    # shrank the gap (× 4011.375 / 4020): 3991.418 µs per step, 2 steps.
    assert s["id"] == "dataloader_workers" and s["traced_saving_us"] == pytest.approx(8000)
    assert s["saving_us"] == pytest.approx(2 * 4000 * 4011.375 / 4020)
    assert s["saving_pct"] == pytest.approx(100 * 4000 * 4011.375 / 4020 / 9989.375)
    assert {"title", "evidence", "formula", "snippet", "per_step_us"} <= set(s)
    assert s["evidence"][0]["gpu_idle_us"] == pytest.approx(4000)


def test_resnet_num_workers_0_vs_4(shared_traces):
    """The Kineto tb_plugin pair: num_workers=0 loads on the training thread, num_workers=4 does not."""
    base = shared_traces / "kineto_tb_plugin"
    slow = analyze(tracekit.load_trace(base / "resnet50_num_workers_0"))
    before = {s.id: s for s in suggest(slow)}
    after = {s.id: s for s in suggest(analyze(tracekit.load_trace(base / "resnet50_num_workers_4")))}
    dl = before["dataloader_workers"]
    assert dl.saving_us == pytest.approx(355571.0)  # GPU idle inside the 6 loads (415.8 ms of loading)
    assert dl.saving_pct == pytest.approx(100 * 355571.0 / slow.totals.span_us)  # of the 6 steps' span
    assert "num_workers=0" in dl.title and len(dl.evidence) == 6
    assert "dataloader_workers" not in after
    # both copy the batch from pageable memory: 2 copies per step, 19.3 MB + 256 B; per step the saving
    # is span − max(CPU time unblocked, GPU time with pinned copies): at most the CPU's blocked time
    # (span − the CPU's part), or the copies' GPU time when that is more
    pm = before["pinned_memory"]
    assert len(pm.evidence) == 6 and all(r["copies"] == 2 for r in pm.evidence)
    assert all(r["bytes"] == 19267584 + 256 for r in pm.evidence)
    assert 0 < pm.saving_us <= sum(max(r["blocked_us"], r["copy_us"]) for r in pm.evidence)
    assert "pinned_memory" in after


def test_multi_rank_nccl_overlap(shared_traces):
    a = analyze(tracekit.load_trace(shared_traces / "hta" / "trace_filter"))
    s = {x.id: x for x in suggest(a)}["overlap_comm"]
    assert len(a.ranks) == 2 and len(s.evidence) == 4  # 2 ranks x 2 steps
    assert s.saving_us == pytest.approx(168641.0)  # per rank
    assert "SendRecv" in s.evidence[0]["top_kernel"]


def test_cpu_only_trace_has_no_suggestions(shared_traces):
    path = next((shared_traces / "hta" / "cpu_only").glob("*.json.gz"))
    assert suggest(analyze(tracekit.load_trace(path))) == []


def test_every_shared_trace(shared_traces):
    """No rule fails on any real trace; every suggestion carries evidence, a formula with numbers,
    and a saving within the analysed span."""
    paths = sorted({p.parent if p.parent.name in ("trace_filter",) else p for p in shared_trace_files()})
    assert len(paths) >= 15
    for path in paths:
        a = analyze(tracekit.load_trace(path))
        scope = Scope.of(a)
        for s in suggest(a):
            assert s.evidence and any(ch.isdigit() for ch in s.formula), (path, s.id)
            assert 0 < s.saving_us <= scope.span_us and 0 < s.saving_pct <= 100, (path, s.id)
            assert math.isfinite(s.per_step_us)
            json.dumps(s.to_dict(), allow_nan=False)
