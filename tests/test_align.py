"""trace.align: difflib's alignment while its work budget lasts, in-order blocks past it; trace.graphs' candidates."""

from __future__ import annotations

import difflib
import random
import time

from tracekit.trace import align as A


def test_exact_blocks_are_difflibs():
    # the budgeted search is difflib.SequenceMatcher's algorithm (no junk): same blocks on random
    # sequences over small alphabets, where ties between equally long blocks are common
    rng = random.Random(24)
    for _ in range(2000):
        k = rng.randrange(1, 6)
        a = [rng.randrange(k) for _ in range(rng.randrange(0, 40))]
        b = [rng.randrange(k) for _ in range(rng.randrange(0, 40))]
        want = [tuple(m) for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()]
        assert A._exact_blocks(a, b, A.Budget(len(a) + len(b))) == want, (a, b)


def test_exact_search_gives_up_past_its_budget():
    budget = A.Budget(0)
    budget.left = 10
    assert A._exact_blocks(list("ab" * 50), list("ba" * 50), budget) is None
    assert budget.left < 0


def test_in_order_blocks_skip_extra_and_missing_items():
    # b is a with item 3 missing and an extra 'x' after item 7: by hand, blocks a[0:3]=b[0:3],
    # a[4:8]=b[3:7], a[8:12]=b[8:12], then the (12, 12, 0) end
    a = list("abcdefghijkl")
    b = list("abcefghxijkl")
    assert A._in_order_blocks(a, b) == [(0, 0, 3), (4, 3, 4), (8, 8, 4), (12, 12, 0)]
    assert A._in_order_blocks([], list("ab")) == [(0, 2, 0)]
    assert A._in_order_blocks(list("ab"), list("cd")) == [(2, 2, 0)]  # nothing in common


def test_align_past_the_budget_pairs_kinds_in_order():
    # tokens all distinct (a capture without names): only kinds align. 4000 items in a pattern of
    # 3 kinds with every 50th item of b left out: difflib on kinds takes minutes, the in-order
    # walk a fraction of a second; each b item pairs with the a item of the same position before
    # the drops (i = j + number of drops at or before it), 3920 pairs in all
    kinds = ["kernel:gemm", "kernel", "memcpy", "kernel"] * 1000
    keep = [i for i in range(len(kinds)) if i % 50]
    a_tokens = [("?", i) for i in range(len(kinds))]
    b_tokens = [("g", i) for i in keep]
    start = time.process_time()
    pairs = A.align(a_tokens, b_tokens, kinds, [kinds[i] for i in keep])
    assert time.process_time() - start < 5
    assert len(pairs) == len(keep)
    assert all(kinds[i] == kinds[keep[j]] for i, j in pairs)
    assert sum(i == keep[j] for i, j in pairs) >= 0.95 * len(pairs)


def test_align_within_the_budget_is_unchanged():
    # small inputs never reach the budget: the same pairs as difflib's blocks then kinds in gaps
    a = [("k", 1), ("k", 2), ("?", 0), ("k", 3)]
    b = [("k", 1), ("k", 2), ("k", 9), ("k", 3)]
    kinds = ["kernel"] * 4
    assert A.align(a, b, kinds, kinds) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_candidates_by_length_are_the_nearest_in_scan_order():
    # the index returns what the scan it replaced returned: captured sequences of half to twice the
    # graph's length, sorted (stably) by the distance of their length to the graph's, the first 64
    import numpy as np

    from tracekit.trace.graphs import MAX_CANDIDATES, _Candidates, _Captured, _Graph

    rng = random.Random(7)
    for _ in range(200):
        captured = [_Captured(0, [], ("kernel",) * rng.randrange(1, 60), [], np.zeros(0, dtype=bool))
                    for _ in range(rng.randrange(0, 150))]
        index = _Candidates(captured)
        n = rng.randrange(1, 50)
        g = _Graph(tuple(range(n)), ("memcpy",) * n)  # no captured sequence has its exact shape
        near = [c for c in captured if n / 2 <= len(c.kinds) <= 2 * n]
        want = sorted(near, key=lambda c: abs(len(c.kinds) - n))[:MAX_CANDIDATES]
        assert [id(c) for c in index.of(g)] == [id(c) for c in want]
