"""trace.nesting: the vectorised enclosing-interval search gives what the stack sweeps it replaces give."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace import link, tables
from tracekit.trace.nesting import depth_of, enclosing, group_codes


def _ops(ts: list[float], dur: list[float], pid: list[object], tid: list[object]) -> pd.DataFrame:
    t = np.array(ts, dtype=float)
    return pd.DataFrame({tables.OP_TS: t, tables.OP_END: t + np.array(dur, dtype=float),
                         tables.OP_PID: np.array(pid, dtype=object if any(isinstance(p, str) for p in pid) else np.int64),
                         tables.OP_TID: np.array(tid, dtype=object if any(isinstance(x, str) for x in tid) else np.int64)})


def test_nest_ops_by_hand():
    """Thread (1, 1): A [0, 10], B [2, 5], C [5.0005, 6] starts 0.5 ns after B ends (within EPS_US =
    1 ns, so still inside B), D [7, 8] (B has ended: in A); thread (1, 2): E [3, 4] on its own; thread
    (2, 1): F [4, 9] (another process, same tid). Parents A -1, B A, E -1, F -1, C B, D A; depths
    0, 1, 0, 0, 2, 1."""
    ops = _ops([0, 2, 3, 4, 5.0005, 7], [10, 3, 1, 5, 0.9995, 1], [1, 1, 1, 2, 1, 1], [1, 1, 2, 1, 1, 1])
    depth, parent = link.nest_ops(ops)
    assert parent.tolist() == [-1, 0, -1, -1, 1, 0]
    assert depth.tolist() == [0, 1, 0, 0, 2, 1]


def test_enclosing_matches_the_sweeps_on_random_intervals():
    rng = np.random.default_rng(11)
    for trial in range(150):  # ties, improperly nested intervals, string ids
        n = int(rng.integers(1, 150))
        ts = np.sort(rng.integers(0, 30, n).astype(float))
        dur = rng.integers(0, 20, n).astype(float)
        pid = rng.integers(0, 2, n).tolist()
        tid = [("main", 7, 8)[k] for k in rng.integers(0, 3, n)] if trial % 3 == 0 else rng.integers(0, 3, n).tolist()
        ops = _ops(ts.tolist(), dur.tolist(), pid, tid)
        fast, slow = link.nest_ops(ops), link._nest_sweep(ops)
        assert fast[0].tolist() == slow[0].tolist() and fast[1].tolist() == slow[1].tolist()


def test_out_of_order_or_nan_starts_are_left_to_the_sweep():
    one = group_codes(np.zeros(3, dtype=np.int64))
    assert enclosing(np.array([2.0, 1.0, 3.0]), np.array([5.0, 2.0, 4.0]), one) is None
    assert enclosing(np.array([1.0, np.nan, 3.0]), np.array([5.0, 2.0, 4.0]), one) is None
    # a chain 0 <- 1 <- 2 and a second root 3 under nothing: depths 0, 1, 2, 0
    assert depth_of(np.array([-1, 0, 1, -1])).tolist() == [0, 1, 2, 0]


def _climbed(parent: np.ndarray) -> list[int]:
    """Depth of each row by climbing its parents one at a time (the definition)."""
    out = []
    for row in range(len(parent)):
        depth, up = 0, int(parent[row])
        while up >= 0:
            depth, up = depth + 1, int(parent[up])
        out.append(depth)
    return out


def test_depth_of_matches_climbing_on_random_forests():
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 7, 60, 400):
        for _ in range(10):
            parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)], dtype=np.int64)
            perm = rng.permutation(n)  # rows in any order: a parent may come after its child
            where = np.argsort(perm)
            shuffled = np.where(parent[perm] >= 0, where[np.maximum(parent[perm], 0)], -1)
            assert depth_of(parent).tolist() == _climbed(parent)
            assert depth_of(shuffled).tolist() == _climbed(shuffled)


def test_a_chain_of_identical_intervals_is_nested_in_linear_time():
    """200,000 ops on one thread, all at the same instant with the same length: each encloses the next,
    so the chain is 200,000 deep; one-level-per-pass depths took a pass per level (n^2/2 row steps,
    minutes here), pointer jumping takes 18 passes."""
    import time

    n = 200_000
    ops = _ops([5.0] * n, [3.0] * n, [1] * n, [1] * n)
    start = time.perf_counter()
    depth, parent = link.nest_ops(ops)
    took = time.perf_counter() - start
    assert parent.tolist() == list(range(-1, n - 1))
    assert depth.tolist() == list(range(n))
    assert took < 3.0, f"nesting 200,000 identical ops took {took:.1f} s"
