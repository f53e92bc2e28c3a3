"""The recorded sample traces the held-out tests read: a recording by set and name (skipped when absent), its raw events and its ProfilerStep windows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

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
