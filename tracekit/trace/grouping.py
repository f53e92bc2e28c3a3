"""Rows grouped by a key in one sort, so that a loop over steps does not scan every row once per step."""

from __future__ import annotations

import numpy as np


def rows_by_key(rows: np.ndarray, key: np.ndarray) -> dict[int, np.ndarray]:
    """`rows` grouped by key[rows] (integer keys, ascending), each group in the order of `rows`: the
    `rows[key[rows] == k]` of every k at the cost of one stable sort."""
    keys = key[rows]
    order = np.argsort(keys, kind="stable")
    ranked, sorted_keys = rows[order], keys[order]
    cut = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    bounds = zip(np.r_[0, cut].tolist(), np.r_[cut, len(rows)].tolist(), strict=True)
    return {int(sorted_keys[lo]): ranked[lo:hi] for lo, hi in bounds if hi > lo}
