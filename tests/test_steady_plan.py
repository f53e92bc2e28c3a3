"""--steps as a value (StepSelection) and the step plan every analyzer reads, on hand-built traces."""

from __future__ import annotations

import numpy as np
import pytest
from test_steady import setup_then_steady
from tracebuilder import TraceBuilder

import tracekit
from tracekit import pipeline
from tracekit.analyzers import steady
from tracekit.analyzers.launch import launch_overhead
from tracekit.analyzers.step_plan import plan_steps, step_mask
from tracekit.analyzers.step_selection import ALL_STEPS, STEADY_STEPS, StepSelection, StepsError
from tracekit.analyzers.timeline import timeline
from tracekit.cli import main
from tracekit.trace import tables


def test_parse_gives_the_json_text_of_each_form():
    assert StepSelection.parse("steady") == STEADY_STEPS and str(STEADY_STEPS) == "steady"
    assert StepSelection.parse(" ALL ") == ALL_STEPS and ALL_STEPS.mode == "all"
    assert StepSelection.parse("2-5").span == (2, 5) and str(StepSelection.parse("2-5")) == "2-5"
    assert StepSelection.parse("7").mode == "7-7"  # one step N is the range N-N
    assert StepSelection.of("all") == ALL_STEPS
    chosen = StepSelection.parse("3-4")
    assert StepSelection.of(chosen) is chosen  # a selection is not parsed again


@pytest.mark.parametrize(("text", "message"), [
    ("every", "--steps takes steady, all, N or N-M, not 'every'"),
    ("2-", "--steps takes steady, all, N or N-M, not '2-'"),
    ("5-2", "--steps 5-2: the range ends before it starts"),
])
def test_parse_refuses_malformed_text(text, message):
    with pytest.raises(StepsError) as err:
        StepSelection.parse(text)
    assert str(err.value) == message


def test_a_selection_is_consistent():
    with pytest.raises(ValueError):
        StepSelection("range")  # a range needs its span
    with pytest.raises(ValueError):
        StepSelection("steady", (1, 2))


def test_plan_of_the_steady_steps(tmp_path):
    """setup_then_steady: GPU rows are the upload and kernel_a (step 0), then kernel_b in steps 1..6;
    the steady steps are 1, 2, 3, 5, 6 (0 set-up, 4 outlier, 7 partial)."""
    rank = setup_then_steady(tmp_path).rank()
    plan = plan_steps(rank)
    assert plan.selection == STEADY_STEPS and plan.scope == "steps" and len(plan) == 8
    assert [p.phase for p in plan.phases] == [steady.SETUP, steady.STEADY, steady.STEADY, steady.STEADY,
                                              steady.OUTLIER, steady.STEADY, steady.STEADY, steady.PARTIAL]
    assert plan.selected.tolist() == [False, True, True, True, False, True, True, False]
    assert plan.span_us[1:].tolist() == pytest.approx([100, 100, 100, 400, 100, 100, 10])
    gpu = rank.gpu
    assert gpu[tables.GPU_NAME][plan.gpu_rows].tolist() == ["kernel_b"] * 5
    assert gpu[tables.GPU_STEP][plan.gpu_rows].tolist() == [1, 2, 3, 5, 6]
    called = rank.runtime[plan.runtime_rows]  # the kernel_b launches of the steady steps
    assert len(called) == 5 and set(called[tables.RT_STEP]) == {1, 2, 3, 5, 6}


def test_plan_of_a_range_and_of_all(tmp_path):
    rank = setup_then_steady(tmp_path).rank()
    some = plan_steps(rank, StepSelection.parse("2-4"))
    assert rank.gpu[tables.GPU_STEP][some.gpu_rows].tolist() == [2, 3, 4]
    every = plan_steps(rank, ALL_STEPS)
    assert every.selected.all() and every.gpu_rows.all() and len(rank.runtime[every.runtime_rows]) == 18
    lo = launch_overhead(rank, every)
    assert lo.totals.steps == 8 and lo.steps_mode == "all" and lo.plan is every
    with pytest.raises(StepsError, match="9-9 selects no step of rank 0"):
        plan_steps(rank, StepSelection.parse("9"))


def test_plan_without_step_marks_keeps_every_gpu_row(tmp_path):
    b = TraceBuilder()
    b.launch(100, 5, "kernel_a", 110, 20)
    b.launch(200, 5, "kernel_b", 210, 20)
    plan = plan_steps(tracekit.load_trace(b.write(tmp_path / "t.json")).rank())
    assert plan.scope == "trace" and [p.step for p in plan.phases] == [-1]
    assert plan.gpu_rows.tolist() == [True, True]


def test_step_mask_by_position():
    positions = np.array([0, -1, 2, 1, 2])
    assert step_mask(positions, np.array([True, False, True])).tolist() == [True, False, True, False, True]
    assert step_mask(positions, np.zeros(0, dtype=bool)).tolist() == [False] * 5


def test_timeline_marks_come_from_the_plan(tmp_path):
    rank = setup_then_steady(tmp_path).rank()
    plan = plan_steps(rank)
    marks = timeline(rank, plan).steps
    assert [m.phase for m in marks] == [p.phase for p in plan.phases]
    assert [round(m.end_us - m.start_us, 6) for m in marks][1:] == [100, 100, 100, 400, 100, 100, 10]
    assert timeline(rank).steps == ()


def test_cli_refuses_bad_steps_before_loading(tmp_path, capsys):
    missing = str(tmp_path / "missing.json")
    assert main(["analyze", missing, "--steps", "every"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for --steps: --steps takes steady, all, N or N-M, not 'every'" in err
    assert "missing.json" not in err  # parsed at the edge, before the trace is looked for


def test_pipeline_refuses_bad_steps_before_any_work(tmp_path):
    with pytest.raises(StepsError):
        pipeline.run(str(tmp_path / "missing.json"), steps="5-2")
