"""The changes made after the ninth held-out set's first run, on its H100 recordings: same-shaped loops joined by a cat (gpu_aug_loop), a loop inside each layer (chunked_ffn), and fused_llm_kernels' silence without attention (unfold_conv). Expected counts are from the raw events; the measured savings from the bare steps in the traces (sample_traces/heldout9/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from shared_analysis import analysed_file

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"
HELDOUT9 = ROOT / "heldout9"


def _trace(name: str) -> Path:
    path = HELDOUT9 / f"{name}.trace.json.gz"
    if not path.exists():
        pytest.skip("the ninth held-out set's recordings are not in this checkout")
    return path


def _events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _top_level_per_step(path: Path, name: str) -> list[int]:
    """Per ProfilerStep, the `name` cpu_ops not nested in another cpu_op of their thread."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    top, reach = [], {}
    for e in ops:
        if e["ts"] >= reach.get(e["tid"], float("-inf")):  # starts after the thread's last top-level op ended
            top.append(e)
            reach[e["tid"]] = e["ts"] + e["dur"]
    return [sum(1 for e in top if e["name"] == name and lo <= e["ts"] < hi) for lo, hi in steps]


def test_gpu_aug_loop_same_shaped_images_joined_by_a_cat():
    """256 per-image augmentations a step (raw events: 256 top-level aten::affine_grid_generator in every
    step), then one aten::cat: batch_samples first, 57.3 ms against 66.30 − 6.03 = 60.27 ms measured."""
    path = _trace("ho9_gpu_aug_loop")
    assert set(_top_level_per_step(path, "aten::affine_grid_generator")) == {256}
    r = analysed_file(path)
    first = r.suggestions[0]
    assert first.id == "batch_samples" and first.evidence[0]["samples_per_step"] == 256
    assert (first.evidence[0]["size_min"], first.evidence[0]["size_max"]) == (1, 1)
    assert first.per_step_us == pytest.approx(60270.0, rel=0.35)
    assert "batch_samples" not in {s.id for s in analysed_file(_trace("ho9_gpu_aug_loop_batched")).suggestions}


def test_chunked_ffn_loop_inside_each_layer():
    """transformers' apply_chunking_to_forward: 32 chunks of 256 rows in each of 6 layers (raw events, every
    step: 192 = 6 × 32 top-level aten::gelu, one per chunk, and 6 top-level aten::cat, one per layer),
    batch_samples first: 54.0 ms against 74.03 − 14.46 = 59.57 measured."""
    path = _trace("ho9_chunked_ffn")
    assert set(_top_level_per_step(path, "aten::gelu")) == {192}
    assert set(_top_level_per_step(path, "aten::cat")) == {6}
    r = analysed_file(path)
    first = r.suggestions[0]
    assert first.id == "batch_samples" and first.evidence[0]["samples_per_step"] == 32
    assert first.per_step_us == pytest.approx(59570.0, rel=0.35)
    assert "batch_samples" not in {s.id for s in analysed_file(_trace("ho9_chunked_ffn_no_chunking")).suggestions}


def test_fused_llm_kernels_needs_attention():
    """unfold_conv is a ResNet (no attention kernel in the raw events) whose weight standardisation runs
    an rsqrt and, in backward, a neg: no LLM block. bare/train_llm (flash attention) keeps the rule."""
    path = _trace("ho9_unfold_conv")
    kernels = {e["name"] for e in _events(path) if e.get("cat") == "kernel"}
    assert not any(k for k in kernels if "flash" in k or "fmha" in k or "sdpa" in k or "attention" in k)
    assert "fused_llm_kernels" not in {s.id for s in analysed_file(path).suggestions}
    llm = ROOT / "bare" / "train_llm.trace.json.gz"
    if llm.exists():
        assert "fused_llm_kernels" in {s.id for s in analysed_file(llm).suggestions}
