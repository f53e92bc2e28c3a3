"""The report's execution-model surfaces: the unprofiled tile, the critical-path band of the timeline, what-if and combined savings on the cards, the abstain line."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

from tracekit.analyzers.unprofiled import SOURCE_WORDS
from tracekit.model import critical_segments, replay
from tracekit.pipeline import run
from tracekit.pipeline.local import LocalResult
from tracekit.report.context import RankView, rank_view, report_view
from tracekit.report.critical_view import MAX_PATH_SEGMENTS
from tracekit.report.html import render
from tracekit.suggestions.whatif import NO_REPLAY
from tracekit.units import fmt_int, fmt_pct, fmt_time


def no_marks_trace(path: Path) -> Path:
    """Eight iterations of mm, add, relu (each a 5 µs launch, an 8 µs kernel) and no ProfilerStep
    mark: the steps are inferred from the repeating ops, which the execution model does not replay."""
    b = TraceBuilder()
    for s in range(8):
        t = s * 100.0
        for k, name in enumerate(["aten::mm", "aten::add", "aten::relu"]):
            e = b.op(name, t + 2 + 25 * k, 20)
            b.launch(t + 5 + 25 * k, 5, f"kernel_{name[6:]}", t + 14 + 25 * k, 8, ext=e)
    return b.write(path)


def _local(name: str) -> LocalResult:
    path = SAMPLE_TRACES / name
    if not path.exists():
        pytest.skip(f"sample_traces/{name} is not in this checkout")
    return analysed_file(path)


def _view(local: LocalResult) -> RankView:
    return rank_view(local.analysis, list(local.suggestions), (), model=local.models[0])


@pytest.fixture(scope="module")
def gpt2() -> tuple[LocalResult, RankView]:
    local = _local("gpt2_decode.trace.json.gz")
    return local, _view(local)


@pytest.fixture(scope="module")
def optimizer() -> tuple[LocalResult, RankView]:
    local = _local("train_optimizer_loop.trace.json.gz")
    return local, _view(local)


def decoded(band: dict, entry: dict) -> list[tuple[float, float, str]]:
    """(start, end, kind) of one step of the band, times as the page has them."""
    t, k = entry["t"], entry["k"]
    assert len(t) == len(k) + 1
    return [(t[i], t[i + 1], band["kinds"][int(k[i])]) for i in range(len(k))]


def _matches(got: list[tuple[float, float, str]], segments, t0: float) -> None:
    assert len(got) == len(segments)
    for (a, b, kind), s in zip(got, segments, strict=True):
        assert kind == s.kind
        assert a == pytest.approx(s.start_us - t0, abs=1e-3) and b == pytest.approx(s.end_us - t0, abs=1e-3)


def test_band_holds_the_critical_path_of_steps_around_the_slowest(gpt2):
    local, view = gpt2
    model = local.models[0]
    t0 = local.analysis.ranks[0].timeline.t0_us
    band = view.timeline["critical"]
    paths = [critical_segments(s.graph) for s in model.steps]
    counts = [len(p) for p in paths]
    numbers = [s.graph.step for s in model.steps]
    shown = [e["step"] for e in band["steps"]]
    first, last = numbers.index(shown[0]), numbers.index(shown[-1])
    assert shown == numbers[first:last + 1]  # a run of consecutive steady steps, in time order
    slowest = max(model.steps, key=lambda s: s.graph.traced_span_us).graph.step
    assert slowest in shown
    used = sum(counts[first:last + 1])
    assert used <= MAX_PATH_SEGMENTS and band["segments"] == used and band["total"] == sum(counts)
    # as many as fit: one more step on either side would pass the cap
    for i in (first - 1, last + 1):
        if 0 <= i < len(counts):
            assert used + counts[i] > MAX_PATH_SEGMENTS
    for entry, i in zip(band["steps"], range(first, last + 1), strict=True):
        _matches(decoded(band, entry), paths[i], t0)
    assert f"{len(shown)} steady steps of {len(model.steps)}" in band["note"]
    assert fmt_int(sum(counts)) in band["note"]
    # the legend's shares: the replay's critical-path parts over every steady step, not just those drawn
    parts = [replay(s.graph).path for s in model.steps]
    cpu, launch, sync, gpu = (sum(getattr(p, f) for p in parts) for f in ("cpu_gap_us", "launch_us", "sync_us", "gpu_us"))
    total = cpu + launch + sync + gpu
    assert [x["share"] for x in band["legend"]] == [fmt_pct(v / total) for v in (cpu, launch, sync, gpu)]
    # the page carries the same data, with the toggle and the legend
    html = render(report_view([view], path="gpt2_decode.trace.json.gz"))
    data = re.search(r'<script type="application/json" id="r0-tl-data">(.*?)</script>', html, re.S)
    assert data is not None and json.loads(data.group(1))["critical"] == band
    assert 'class="tl-path-toggle"' in html and "launch calls and latency" in html


def test_band_of_a_step_over_the_cap_is_cut_and_says_so(optimizer):
    local, view = optimizer
    model = local.models[0]
    t0 = local.analysis.ranks[0].timeline.t0_us
    band = view.timeline["critical"]
    slowest = max(model.steps, key=lambda s: s.graph.traced_span_us)
    segments = critical_segments(slowest.graph)
    assert len(segments) > MAX_PATH_SEGMENTS  # 2,416 per-parameter optimizer kernels a step
    assert [e["step"] for e in band["steps"]] == [slowest.graph.step]
    _matches(decoded(band, band["steps"][0]), segments[:MAX_PATH_SEGMENTS], t0)
    assert f"{fmt_int(MAX_PATH_SEGMENTS)} of its {fmt_int(len(segments))} segments" in band["note"]


def test_unprofiled_tile_beside_the_traced_step(gpt2):
    local, view = gpt2
    model = local.models[0]
    n = len(model.steps)
    projected = sum(s.projected.span_us for s in model.steps) / n
    traced = sum(s.graph.traced_span_us for s in model.steps) / n
    tile = view.tiles[0]
    assert tile.label == "Step without profiler" and tile.value == fmt_time(projected)
    assert tile.sub.startswith(f"{fmt_time(traced)} traced · ")
    assert tile.note == f"profiler cost from {SOURCE_WORDS['default']}"
    assert SOURCE_WORDS["default"] in tile.title and "µs per recorded CPU event" in tile.title
    assert view.model_note == ""
    html = render(report_view([view], path="g"))
    shown = re.search(r'<div class="tile tile-model" title="([^"]*)">', html)
    assert shown is not None and unescape(shown.group(1)) == tile.title  # the tooltip, escaped
    assert f'<dd class="tile-n">{tile.note}</dd>' in html


def _cards_follow_the_suggestions(local: LocalResult, view: RankView) -> None:
    steps = len(local.models[0].steps)  # the steady steps of the rank
    found = sorted(local.suggestions, key=lambda s: -s.saving_us)
    assert [c.id for c in view.suggestions] == [s.id for s in found]
    for i, (card, s) in enumerate(zip(view.suggestions, found, strict=True)):
        assert s.traced_saving_us is not None
        assert card.saving == f"{fmt_time(s.saving_us / steps)} per step"
        if s.combined_us is not None and i > 0 and s.combined_us != s.saving_us:
            assert card.combined == (f"With the change{'s' if i > 1 else ''} above: "
                                     f"{fmt_time(s.combined_us / steps)} per step (replayed together).")
        else:
            assert card.combined == ""
        replayed, traced = fmt_time(s.saving_us / steps), fmt_time(s.traced_saving_us / steps)
        if s.whatif == NO_REPLAY:
            assert card.whatif.startswith(f"The rule's estimate on the traced timeline ({traced} per step)")
        elif replayed != traced:
            assert card.whatif == (f"What-if replay on the unprofiled step: {replayed} per step; on the traced "
                                   f"timeline the rule estimated {traced}.")
        else:
            assert card.whatif == (f"What-if replay on the unprofiled step: {replayed} per step, as the rule "
                                   "estimated on the traced timeline.")


def test_cards_gpt2_decode(gpt2):
    local, view = gpt2
    _cards_follow_the_suggestions(local, view)
    top = view.suggestions[0]
    assert top.id == "cuda_graphs" and top.whatif.startswith("What-if replay on the unprofiled step")
    assert top.note == ""  # priced on the unprofiled step: no profiler caveat


def test_cards_and_overlap_train_optimizer_loop(optimizer):
    local, view = optimizer
    _cards_follow_the_suggestions(local, view)
    steps = len(local.models[0].steps)
    found = sorted(local.suggestions, key=lambda s: -s.saving_us)
    together = [(i + 1, s) for i, s in enumerate(found) if s.combined_us is not None]
    assert len(together) >= 2 and view.suggestions[1].combined  # fused optimizer + CUDA graphs
    last = together[-1][1]
    alone = sum(s.saving_us / steps for _, s in together)
    assert last.combined_us is not None and last.combined_us < sum(s.saving_us for _, s in together)
    assert f"save {fmt_time(last.combined_us / steps)} per step, not the {fmt_time(alone)}" in view.overlap_note
    html = render(report_view([view], path="o"))
    assert view.suggestions[1].combined in html and view.suggestions[0].whatif in html


def test_abstaining_rank_says_why(tmp_path):
    local = analysed_file(no_marks_trace(tmp_path / "nomarks.json"))
    model = local.models[0]
    assert not model.trusted
    why = model.unprofiled.abstained[0][1]
    assert why.startswith("no ProfilerStep marks")
    view = _view(local)
    assert why in view.model_note and view.model_note.startswith("No projection without the profiler")
    assert "Step without profiler" not in [t.label for t in view.tiles]
    band = view.timeline["critical"]
    assert band["steps"] == [] and why in band["note"]
    html = render(report_view([view], path="n"))
    assert f'<p class="model-note small">{view.model_note}</p>' in html
    assert 'class="tl-path-toggle"' not in html


def test_the_pipeline_threads_the_model_into_the_view(gpt2):
    _, view = gpt2
    result = run(SAMPLE_TRACES / "gpt2_decode.trace.json.gz", view=True, jobs=1)
    got = result.results[0].view
    assert got is not None and got.timeline["critical"] == view.timeline["critical"]
    assert [c.combined for c in got.suggestions] == [c.combined for c in view.suggestions]
