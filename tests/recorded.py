"""The recorded sample traces the held-out tests read: a recording by set and name (skipped when absent), its raw events, its ProfilerStep windows, its bare steps, and the two checks every held-out set makes (the labelled fix first with a measured saving; the projection against the bare step)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from tracekit.pipeline.local import analyse_file

SAMPLE_TRACES = Path(__file__).resolve().parents[1] / "sample_traces"


def recording(folder: str, name: str) -> Path:
    """sample_traces/FOLDER/NAME.trace.json.gz, or skip the test when this checkout does not have it."""
    path = SAMPLE_TRACES / folder / f"{name}.trace.json.gz"
    if not path.exists():
        pytest.skip(f"sample_traces/{folder} is not in this checkout")
    return path


def raw_events(path: Path) -> list[dict]:
    """The trace's traceEvents, as json.load reads them."""
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def profiler_steps(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) of each ProfilerStep#N annotation, in time order."""
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                  and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))


def bare_ms(path: Path) -> float:
    """Median of the unprofiled step times `tracekit profile` stored in the trace (raw JSON)."""
    with gzip.open(path) as f:
        steps = json.load(f)["tracekit"]["bare"]["step_us"]
    return statistics.median(steps.values()) / 1000


def check_first_and_within(folder: str, before: str, after: str, rule: str) -> None:
    """The labelled rule is first on the baseline, its what-if within ±35 % of the saving the two
    recordings' bare steps measured, and it is silent on the fixed variant."""
    before_path, after_path = recording(folder, before), recording(folder, after)
    saving = bare_ms(before_path) - bare_ms(after_path)
    found = analyse_file(before_path)
    assert found.suggestions[0].id == rule
    assert found.suggestions[0].per_step_us / 1000 == pytest.approx(saving, rel=0.35)
    assert rule not in {s.id for s in analyse_file(after_path).suggestions}


def check_projection(folder: str, name: str) -> None:
    """The recording's projected unprofiled step within ±15 % of the median of its own bare steps."""
    path = recording(folder, name)
    u = analyse_file(path).analysis.unprofiled
    assert u is not None and u.trusted
    assert u.step_us / 1000 == pytest.approx(bare_ms(path), rel=0.15)
