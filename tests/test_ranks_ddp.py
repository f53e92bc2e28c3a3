"""The DDP sample script on the CPU (gloo, 2 ranks under torchrun, rank 1's DataLoader slowed), recorded
by `tracekit profile`; the straggler, its cause and the waiting checked against the raw JSON events."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from test_ranks_samples import waits_caused

from tracekit import pipeline
from tracekit.profile.record import per_rank_path

SCRIPT = SAMPLE_TRACES / "scripts" / "ddp_train.py"
SLOW_MS = 40.0  # well above the step-to-step jitter of two CPU ranks on a loaded 2-core machine


def test_per_rank_path():
    p = Path("/x/rank{rank}.trace.json.gz")
    assert per_rank_path(p, {"RANK": "3", "WORLD_SIZE": "4"}) == Path("/x/rank3.trace.json.gz")
    assert per_rank_path(p, {}) == Path("/x/rank0.trace.json.gz")
    plain = Path("/x/train.trace.json.gz")
    assert per_rank_path(plain, {"RANK": "1", "WORLD_SIZE": "2"}) == Path("/x/train.rank1.trace.json.gz")
    assert per_rank_path(plain, {"RANK": "0", "WORLD_SIZE": "1"}) == plain
    assert per_rank_path(plain, {}) == plain


def raw_events(path: Path) -> tuple[dict[tuple[int, str, int], tuple[float, float]], dict[int, float]]:
    """From the JSON itself: {(step, name, n): (start, dur)} of the gloo:* collectives (the n-th of
    that name in the step) and {step: DataLoader µs}."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#")]

    def step_of(ts: float) -> int | None:
        return next((n for n, a, b in steps if a <= ts < b), None)

    coll: dict[tuple[int, str, int], tuple[float, float]] = {}
    loader: dict[int, float] = {}
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        name, step = str(e.get("name", "")), step_of(e.get("ts", -1))
        if step is None:
            continue
        if name.startswith("gloo:"):
            n = sum(1 for k in coll if k[:2] == (step, name))
            coll[(step, name, n)] = (e["ts"], e["dur"])
        if name.startswith("enumerate(DataLoader)"):
            loader[step] = loader.get(step, 0.0) + e["dur"]
    return coll, loader


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "tracekit", "profile", "-q", "--warmup", "2", "--no-report", "-o",
           str(out / "rank{rank}.trace.json.gz"), str(SCRIPT), "--steps", "14", "--slow-rank", "1",
           "--slow-ms", str(SLOW_MS)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_each_rank_writes_its_own_trace(ddp_run):
    names = sorted(p.name for p in ddp_run.iterdir())
    assert names == ["rank0.trace.json.gz", "rank1.trace.json.gz"]
    for r in (0, 1):
        with gzip.open(ddp_run / f"rank{r}.trace.json.gz") as fh:
            doc = json.load(fh)
        assert doc["distributedInfo"]["rank"] == r and doc["distributedInfo"]["backend"] == "gloo"


def test_straggler_cause_and_wait_from_raw_events(ddp_run):
    c0, l0 = raw_events(ddp_run / "rank0.trace.json.gz")
    c1, l1 = raw_events(ddp_run / "rank1.trace.json.gz")
    result = pipeline.run(ddp_run, jobs=2)
    cross = result.cross
    steps = cross.steps
    assert len(steps) >= 4
    # per collective: the later rank is the one waited for; the other waits min(gap, its own time)
    caused = waits_caused(c0, c1, steps)
    late_steps = [x for x in steps if caused[1][x] > caused[0][x]]
    [s] = cross.stragglers
    assert s.rank == 1 and s.cause == "data_loading"
    assert s.late_steps_pct == pytest.approx(100.0 * len(late_steps) / len(steps))
    assert s.others_wait_us_per_step == pytest.approx(sum(caused[1].values()) / len(steps), rel=1e-6)
    assert s.others_wait_us_per_step > 0.5 * SLOW_MS * 1000
    # the cause: rank 1's DataLoader time per step against rank 0's, from the raw events
    extra = sum(l1.get(x, 0.0) - l0.get(x, 0.0) for x in steps) / len(steps)
    assert s.components["dataloader_us"][0] - s.components["dataloader_us"][1] == pytest.approx(extra, rel=0.01)
    assert "DataLoader" in s.evidence
    assert any(x.id == "rank_imbalance" for x in result.cross_suggestions)
