"""`tracekit profile` records garbage-collection pauses as annotations and the debug settings in its metadata; gc_collect reads them."""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = '''\
import gc
import torch
import tracekit
torch.autograd.set_detect_anomaly(True)
junk = [[{} for _ in range(50)] for _ in range(2000)]  # 100,000 dicts for the collector to walk
w = torch.randn(16, 16, requires_grad=True)
for i in range(4):
    (torch.randn(8, 16) @ w).sum().backward()
    gc.collect()
    tracekit.step()
torch.autograd.set_detect_anomaly(False)
'''


def _profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    from tracekit.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.py").write_text(SCRIPT)
    try:
        code = main(["profile", "--no-report", "--no-bare", "--warmup", "1", "--active", "2", "loop.py"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0
    with gzip.open(tmp_path / "loop.trace.json.gz", "rt") as f:
        return json.load(f)


def test_collections_become_annotations_and_settings_metadata(tmp_path, monkeypatch):
    collect, callbacks = gc.collect, list(gc.callbacks)
    doc = _profile(tmp_path, monkeypatch)
    assert (gc.collect, gc.callbacks) == (collect, callbacks)  # restored after the run
    meta = doc["tracekit"]
    assert meta["gc_pauses"] == "annotations"
    # anomaly mode was on at the step marks, off at the end: on counts
    assert meta["debug_modes"]["anomaly"] is True and meta["debug_modes"]["deterministic_algorithms"] is False
    marks = [e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#") and e["cat"] == "user_annotation"]
    pauses = [e for e in doc["traceEvents"] if e.get("name") == "tracekit::gc.collect() gen 2"]
    # the script's gc.collect() runs once in each of the 2 recorded steps, inside it, on the script's thread
    assert len(marks) == 2 and len(pauses) == 2
    assert all(any(m["ts"] <= p["ts"] and p["ts"] + p["dur"] <= m["ts"] + m["dur"] for m in marks) for p in pauses)
    assert {p["tid"] for p in pauses} == {m["tid"] for m in marks}

    from tracekit.pipeline.local import analyse_file
    from tracekit.suggestions.rules import RULES_BY_ID

    result = analyse_file(tmp_path / "loop.trace.json.gz")
    s = RULES_BY_ID["gc_collect"].run(result.analysis)
    assert s is not None
    # its saving is the annotations' time per step, from the raw events
    assert s.per_step_us == pytest.approx(sum(p["dur"] for p in pauses) / 2, rel=1e-6)
    assert [e["gc_collect_calls"] for e in s.evidence] == [1, 1]


def test_a_failing_record_never_breaks_the_script():
    import types

    from tracekit.profile.pauses import GcPauses

    def record_function(name):
        raise RuntimeError("no profiler")

    broken = types.ModuleType("torch")  # a torch whose record_function raises
    broken.autograd = types.SimpleNamespace(profiler=types.SimpleNamespace(record_function=record_function))
    pauses = GcPauses(broken)
    pauses.install()
    try:
        assert gc.collect() >= 0  # the wrapped collect still collects
    finally:
        pauses.restore()
    assert pauses.collections == 0 and gc.callbacks.count(pauses._callback) == 0


def test_a_collection_imports_nothing():
    """A collection can start while importlib holds a module lock; an import inside the callback then
    fails the script's import (KeyError from the lock's bookkeeping: tests/data/profile/triton_kernels.py
    under TRITON_INTERPRET=1, whose first record_function in a collection imported
    torch.profiler._cupti_monitor). After install() a collection imports no module. In a fresh
    interpreter, where torch has not entered a record_function yet."""
    import subprocess
    import sys

    code = (
        "import gc, sys, torch\n"
        "from tracekit.profile.pauses import GcPauses\n"
        "p = GcPauses(torch); p.install()\n"
        "before = set(sys.modules); gc.collect(); new = sorted(set(sys.modules) - before)\n"
        "p.restore(); print(p.collections, new)\n"
    )
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["1", "[]"]  # one collection recorded, no module imported by it
