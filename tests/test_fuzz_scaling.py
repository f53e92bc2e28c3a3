"""Scaling part of the fuzz corpus: adversarial shapes (tests/scaling_shapes.py) at a size and at ten
times it. Ten times the input may cost at most 15x the CPU time (a quadratic pass costs ~100x),
and the large run's peak of traced memory must stay within a fixed multiple of the raw input
(a pass that keeps a copy per nesting level or per stream grows it with the input instead).

benchmarks/fuzz_corpus.py --scaling N runs the same shapes at N times these sizes and prints the numbers."""

from __future__ import annotations

from pathlib import Path

from scaling_shapes import SHAPES, measure

MAX_TIME_RATIO = 15.0  # CPU time of 10x the input over that of the input
# Peak traced memory of the large run over its raw JSON bytes, as measured at the CI sizes on this
# code (the input, the decoded tables, the analysis and the JSON printed) with ~40 % headroom; the
# project's target is 2x (docs/design.md, "Linear passes"). Capture alignment and synced_streams
# are left out: under tracemalloc their large runs take longer than all the others together.
MAX_MEMORY_RATIO = {"same_timestamps": 5.0, "deep_nesting": 5.0, "many_streams": 25.0, "aperiodic": 5.0,
                    "export_large": 7.5, "export_separators": 9.0}


def test_ten_times_the_input_costs_at_most_fifteen_times(tmp_path: Path) -> None:
    got = measure(SHAPES, tmp_path, memory=frozenset(MAX_MEMORY_RATIO))
    problems = []
    for name, m in got.items():
        ratio = m["large"] / max(m["small"], 0.01)
        if ratio > MAX_TIME_RATIO:
            problems.append(f"{name}: 10x the input took {ratio:.1f}x the time ({m})")
        if name in MAX_MEMORY_RATIO and m["peak"] / m["raw_bytes"] > MAX_MEMORY_RATIO[name]:
            problems.append(f"{name}: peak memory {m['peak'] / m['raw_bytes']:.1f}x the raw input ({m})")
    assert len(got) == len(SHAPES) and not problems, "\n".join(problems)
