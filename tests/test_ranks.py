"""Cross-rank view on a synthetic 3-rank job whose rank 2 loads its data slowly (numbers worked out by hand)."""

from __future__ import annotations

import json
import re

import pytest
from tracebuilder import TraceBuilder

from tracekit import pipeline
from tracekit.analyzers.rank_digest import collective_kind
from tracekit.analyzers.ranks import by_chance, cross_rank
from tracekit.cli import main
from tracekit.suggestions.rules import CROSS_RANK_RULES, RULES
from tracekit.suggestions.rules_ranks import rank_imbalance

T0 = 1_790_000_000_000_000.0  # absolute µs, as Kineto writes them: times must survive float rounding
STEP_US = 10_000.0
STEPS = (1, 2, 3, 4)
DATALOADER_US = {0: 500.0, 1: 500.0, 2: 4500.0}
JITTER_US = {0: 0.0, 1: 50.0, 2: 0.0}
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def rank_trace(rank: int) -> TraceBuilder:
    """Per step: DataLoader (rank 2: 4.5 ms, others 0.5 ms), a 2 ms GEMM, then two all-reduces.

    The first all-reduce starts 2.2 ms after the DataLoader ends (+50 µs on rank 1) and ends at the
    same time on every rank (step + 7.7 ms); the second starts at step + 7.8 ms, rank 0 10 µs later.
    """
    b = TraceBuilder()
    b.top["distributedInfo"] = {"rank": rank, "world_size": 3, "backend": "nccl"}
    if rank == 1:  # rank 1's file starts 1 ms earlier: its own origin differs from the others'
        b.op("aten::empty", T0 - 1000.0, 5.0)
    for k in STEPS:
        s = T0 + k * STEP_US
        b.annotation(f"ProfilerStep#{k}", s, STEP_US - 10.0)
        dl = DATALOADER_US[rank]
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s + 1.0, dl - 1.0)
        b.launch(s + dl + 50.0, 10.0, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", s + dl + 100.0, 2000.0)
        start = s + dl + 2200.0 + JITTER_US[rank]
        b.launch(s + dl + 2150.0, 10.0, ALLREDUCE, start, s + 7700.0 - start)
        late = 10.0 if rank == 0 else 0.0
        b.launch(s + 7750.0, 10.0, ALLREDUCE, s + 7800.0 + late, 100.0 - late)
    return b


def write_job(folder, name: str = "trace_rank{r}.json"):
    """The 3 rank files of the job in `folder` (created), named `name` with {r} the rank."""
    folder.mkdir()
    for r in range(3):
        rank_trace(r).write(folder / name.format(r=r))
    return folder


@pytest.fixture
def job(tmp_path):
    return write_job(tmp_path / "job")


# Hand-worked numbers per step (see rank_trace): first all-reduce starts at s+2700 (rank 0),
# s+2750 (rank 1), s+6700 (rank 2); all end at s+7700. Rank 2 is last: rank 0 waits 4000 µs,
# rank 1 3950 µs. Second all-reduce: rank 0 is last by 10 µs, ranks 1 and 2 wait 10 µs each.
WAIT = {0: 4000.0, 1: 3950.0 + 10.0, 2: 10.0}
OTHERS_WAIT_FOR_2 = 4000.0 + 3950.0
LATE_BY_2 = 6700.0 - (2700.0 + 2750.0) / 2  # vs the median of the other ranks' starts


def test_collective_kind():
    assert collective_kind(ALLREDUCE) == "AllReduce"
    assert collective_kind("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "AllGather"
    assert collective_kind("gloo:all_reduce") == "all_reduce"


def test_straggler_cause_and_waiting(job):
    result = pipeline.run(job, jobs=1)
    cross = result.cross
    assert cross.ranks == (0, 1, 2)
    assert set(cross.steps) <= set(STEPS) and len(cross.steps) >= 3
    [s] = cross.stragglers
    assert s.rank == 2 and s.late_steps_pct == 100.0
    assert s.late_us_per_step == pytest.approx(LATE_BY_2, abs=0.01)
    assert s.others_wait_us_per_step == pytest.approx(OTHERS_WAIT_FOR_2, abs=0.01)
    assert s.cause == "data_loading"
    assert s.components["dataloader_us"] == pytest.approx((4499.0, 499.0), abs=0.01)
    assert "rank 2 is late in 100 % of steps by 3.98 ms" in s.evidence and "DataLoader" in s.evidence
    for row in cross.rank_steps:
        assert row.wait_us == pytest.approx(WAIT[row.rank], abs=0.01)
    for k in cross.skew:
        assert k.late_rank == 2 and k.collectives == 2
        assert k.start_spread_max_us == pytest.approx(6700.0 - 2700.0, abs=0.01)
        assert k.wait_us == pytest.approx(sum(WAIT.values()), abs=0.01)


def test_rank_imbalance_rule(job):
    cross = pipeline.run(job, jobs=1).cross
    s = rank_imbalance(cross)
    n = len(cross.steps)
    assert s.id == "rank_imbalance" and "Rank 2" in s.title
    # saving: the others' waiting for rank 2 over the compared steps, per rank (3 ranks)
    assert s.saving_us == pytest.approx(OTHERS_WAIT_FOR_2 * n / 3, abs=0.1)
    span_per_rank = sum(r.span_us for r in cross.rank_steps) / 3
    assert s.saving_pct == pytest.approx(100 * s.saving_us / span_per_rank, rel=1e-9)
    assert "rank_imbalance" in [r.id for r in CROSS_RANK_RULES] and "rank_imbalance" not in [r.id for r in RULES]


def test_rule_silent_without_straggler(tmp_path):
    folder = tmp_path / "even"
    folder.mkdir()
    for r in range(2):
        rank_trace(0).write(folder / f"rank{r}.json")  # identical ranks: nobody is late
    result = pipeline.run(folder, jobs=1)
    assert result.cross.stragglers == ()
    assert rank_imbalance(result.cross) is None
    assert result.cross_suggestions == ()


def test_by_chance():
    # P(X >= k), X ~ Binomial(n, 1/ranks), worked out by hand
    assert by_chance(9, 12, 2) == pytest.approx((220 + 66 + 12 + 1) / 4096)
    assert by_chance(4, 4, 3) == pytest.approx(1 / 81)
    assert by_chance(0, 5, 2) == pytest.approx(1.0)


def test_cross_rank_is_pure_over_digests(job):
    result = pipeline.run(job, jobs=1)
    again = cross_rank([r.digest for r in reversed(result.results)])
    assert again == result.cross


def test_json_keys(job, capsys):
    assert main(["analyze", "--json", "-q", "--jobs", "1", str(job)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2]
    [s] = doc["stragglers"]
    assert set(s) >= {"rank", "late_steps_pct", "late_us_per_step", "others_wait_us_per_step", "cause", "evidence"}
    assert s["rank"] == 2 and s["cause"] == "data_loading"
    k = doc["skew"][0]
    assert set(k) >= {"step", "span_min_us", "span_median_us", "span_max_us", "start_spread_max_us"}
    assert doc["rank_verdicts"] and sum(g["count"] for g in doc["rank_verdicts"]) == 3
    ids = [x["id"] for x in doc["suggestions"]]
    assert "rank_imbalance" in ids
    assert {x.get("rank") for x in doc["suggestions"] if x["id"] != "rank_imbalance"} <= {0, 1, 2}


def test_text_names_the_straggler(job, capsys):
    assert main(["analyze", "-q", "--jobs", "1", str(job)]) == 0
    out = capsys.readouterr().out
    assert "straggler rank 2 is late in 100 % of steps" in out and "skew per step:" in out


def test_report_section_at_the_top(job, tmp_path):
    out = tmp_path / "job.html"
    assert main(["report", "-q", "--jobs", "1", str(job), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    cross, ranks = html.index('id="cross-ranks"'), html.index('<section class="rank"')
    assert cross < ranks
    assert re.search(r'class="rank-link" href="#r2" data-rank="r2"><b>rank 2</b>', html)
    assert len(re.findall(r'<section class="rank"', html)) == 3
