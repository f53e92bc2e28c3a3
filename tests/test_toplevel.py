"""The shared top-level op helpers (detectors/toplevel.py): repeated blocks on hand-written sequences, and per-step, per-thread sequences on a synthetic trace built by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import (
    TopLevel,
    repeated_block,
    step_sequences,
    text_codes,
    top_ops,
)
from tracekit.trace.load import load_trace
from tracekit.trace.tables import GPU_NAME, OP_NAME, OP_PARENT


def _block(text: str, min_repeats: int = 2) -> tuple[int, int, int] | None:
    return repeated_block(text_codes(list(text)), min_repeats)


def test_text_codes_number_by_first_appearance():
    assert text_codes(["b", "a", "b", "c", "a"]).tolist() == [0, 1, 0, 2, 1]


def test_top_ops_at_any_depth():
    # by construction: rows 0..199 are one chain (row i's parent is i - 1), rows 200..202 a root and
    # its child and grandchild, row 203 names a later row as its parent (malformed: kept as its own top)
    parent = np.r_[-1, np.arange(199), -1, 200, 201, 205, -1, -1]
    top = top_ops(pd.DataFrame({OP_PARENT: parent}))
    assert top[:200].tolist() == [0] * 200  # 200 deep: an up-by-one walk capped at 64 levels stopped at 135
    assert top[200:].tolist() == [200, 200, 200, 203, 204, 205]


def test_repeated_block_finds_the_longest_stretch():
    # "x" then "abc" three times then "y": 'a' sits at 1, 4, 7 (period 3), the stretch 1..9 is abc×3
    assert _block("xabcabcabcy") == (1, 3, 3)
    # the forward repeated twice at the start: period 4 from 'p' at 0 and 4
    assert _block("pqrspqrs") == (0, 4, 2)


def test_repeated_block_needs_even_spacing_and_room_for_its_repeats():
    assert _block("abcd") is None  # nothing occurs twice
    # 'a' at 0, 2, 3: gaps 2 and 1, uneven; 'b' at 1 and 4: period 3 needs 1 + 2 × 3 = 7 items, 5 here
    assert _block("abaab") is None
    # 'a' at 0, 3, 5 is uneven, but 'b' at 1 and 2 is the one-op block "b" twice
    assert _block("abbaca") == (1, 1, 2)
    # 'a' at 0 and 3, period 3, needs 6 items; 'b' at 1 and 4 needs 7: five items hold neither
    assert _block("abcab") is None
    # evenly spaced but the repeats differ: 'a' at 0 and 2, "ab" then "ac"; 'b', 'c' once
    assert _block("abac") is None


def test_repeated_block_keeps_the_first_of_equal_lengths_and_min_repeats():
    # "aabb": 'a' at 0,1 → (0, 1, 2); 'b' at 2,3 → (2, 1, 2), same length: the first code tried wins
    assert _block("aabb") == (0, 1, 2)
    assert _block("abab", min_repeats=3) is None  # 'a' twice only
    assert _block("ababab", min_repeats=3) == (0, 2, 3)


def test_step_sequences_per_thread_in_time_order(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    # main thread 100: ops at 300 and 100 (written out of time order), thread 7: one op at 200,
    # and an op at 400 that launches nothing (left out)
    for name, ts, tid in (("mul", 300, 100), ("add", 100, 100), ("sub", 200, 7)):
        b.launch(ts + 1, 1, f"k_{name}", ts + 10, 2, ext=b.op(f"aten::{name}", ts, 10, tid=tid), tid=tid)
    b.op("aten::view", 400, 10)
    rank = load_trace(b.write(tmp_path / "t.json")).ranks[0]
    top = TopLevel.of(rank)
    names = rank.ops[OP_NAME].to_numpy(dtype=object)
    # three launches, one per launching op; the view issued none
    assert int(top.launches.sum()) == 3 and int(top.syncs.sum()) == 0
    (step,) = step_sequences(rank, StepsOf.of(rank), top)
    assert step.step == 1
    assert [(tid, [names[r] for r in rows.tolist()]) for tid, rows in step.threads] == [
        (7, ["aten::sub"]), (100, ["aten::add", "aten::mul"])]
    assert step.rows.tolist() == sorted(np.concatenate([r for _, r in step.threads]).tolist())
    # each kernel maps back to the top-level op that launched it
    gpu_names = rank.gpu[GPU_NAME].to_numpy(dtype=object)
    assert {gpu_names[i]: names[t] for i, t in enumerate(top.gpu_top.tolist())} == {
        "k_mul": "aten::mul", "k_add": "aten::add", "k_sub": "aten::sub"}


def test_repeated_block_at_the_phase_where_its_last_repetition_is_whole():
    """'X' is the loop's only op of its own (held-out gpu_aug_loop: affine_grid_generator); the ops
    around it also run before and after the loop, so none of them is evenly spaced. From 'X' (index 4)
    the ten repeats would end in "XcaZ", not a repetition: the block starts before it, at the latest
    phase whose ten repetitions all match: "bXca" from index 3 (the block "abXc" from 2 reads the same)."""
    text = "ab" + "abXc" * 10 + "aZc"
    assert _block(text) == (3, 4, 10)
    start, period, repeats = _block(text)
    assert text[start + period * repeats] == "Z"  # the op after the last repetition
