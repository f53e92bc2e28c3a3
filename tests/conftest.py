"""Shared fixtures: the third-party trace corpus beside the repo (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
SAMPLE_TRACES = Path(__file__).resolve().parents[1] / "sample_traces"


def shared_trace_files() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent (third-party trace corpus)")
    return SHARED_TRACES
