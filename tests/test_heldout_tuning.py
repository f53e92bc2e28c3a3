"""The H200 held-out pairs the attention-fallback, memory-bound Triton, bf16-autocast and compile
what-ifs were tuned on (sample_traces/heldout/, benchmarks/heldout/RESULTS.md): the pair's rule first
on the baseline, its what-if within ±35 % of the measured unprofiled saving, silent after the fix."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from shared_analysis import analysed_file

HELDOUT = Path(__file__).resolve().parents[1] / "sample_traces" / "heldout"
# (before, the rule its fix answers, a phrase its title must hold)
PAIRS = (
    ("ho_attention_padmask", "use_sdpa", "Head dim 100 is not a multiple of 8: SDPA fell back to math"),
    ("ho_triton_layernorm", "triton_config", "1 warp, 3 stages on a 32,768-program grid reach 53 % of the memory roof"),
    ("ho_vit_train", "lower_precision", "Autocast to bf16"),
    ("ho_norm_gelu_chain", "fuse_elementwise", "torch.compile"),
)


def _bare_ms(path: Path) -> float:
    """The median of the unprofiled step times the file's bare run recorded (raw `tracekit.bare.step_us`)."""
    with gzip.open(path, "rt") as f:
        steps = json.load(f)["tracekit"]["bare"]["step_us"]
    return statistics.median(steps.values()) / 1e3


@pytest.mark.parametrize(("before", "rule", "phrase"), PAIRS)
def test_first_within_35_percent_and_silent_after_the_fix(before: str, rule: str, phrase: str) -> None:
    path, fixed = HELDOUT / f"{before}.trace.json.gz", HELDOUT / f"{before}_fixed.trace.json.gz"
    if not path.exists() or not fixed.exists():
        pytest.skip(f"{path.name} is not in this checkout")
    # measured saving from the raw bare steps: padmask 12.212 → 3.084 ms (9.13), layernorm 3.395 →
    # 2.485 (0.91), vit 85.087 → 16.382 (68.70), norm_gelu 13.897 → 4.633 (9.26)
    measured = _bare_ms(path) - _bare_ms(fixed)
    found = analysed_file(path).suggestions
    assert found and found[0].id == rule
    assert phrase in found[0].title
    assert found[0].per_step_us / 1e3 == pytest.approx(measured, rel=0.35)
    assert rule not in {s.id for s in analysed_file(fixed).suggestions}
