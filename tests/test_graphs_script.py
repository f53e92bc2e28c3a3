"""sample_traces/scripts/graph_decode.py runs on CPU (tiny model, eager: no graphs) and writes the
serving-style layout: capture_traces/ per batch size, the execution trace, the GEMM shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tracekit

SCRIPT = Path(__file__).resolve().parents[1] / "sample_traces" / "scripts" / "graph_decode.py"


def test_split_mode_on_cpu_writes_the_layout_and_shapes(tmp_path):
    out = tmp_path / "run"
    shapes = tmp_path / "shapes.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "split", "--batch", "1", "2", "--out", str(out),
                           "--shapes", str(shapes)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (out / "capture_traces").iterdir()) == [
        "capture_b1.trace.json.gz", "capture_b2.trace.json.gz"]
    trace = tracekit.load_trace(out)  # capture_traces/ picked up: no graphs on CPU, so not joined
    assert len(trace.rank().steps) == 17  # ProfilerStep#0 (prefills) + 16 tokens
    assert sum("capture trace not joined" in w for w in trace.warnings) == 2
    doc = json.loads(shapes.read_text())
    for entry in doc:
        c, b = entry["config"], entry["batch"]
        h, f, layers, heads, t = c["hidden"], c["ffn"], c["layers"], c["heads"], c["max_len"]
        d = h // heads
        # per layer: q, k, v, o (h x h), gate, up (h -> f), down (f -> h); scores and context bmm
        # over the whole static cache; then the LM head
        per_layer = 2 * b * (4 * h * h + 3 * h * f) + 2 * 2 * b * heads * t * d
        assert entry["flops_per_step"] == layers * per_layer + 2 * b * h * c["vocab"]
