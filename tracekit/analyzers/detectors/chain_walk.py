"""The elementwise-chain walk of sequences.find_chains over integer-coded kernel sequences (numpy)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

OpShapes = tuple[str, list[tuple[tuple[int, ...], str]], tuple[tuple[int, ...], str]]  # name, ins, out


def chain_nodes(order: np.ndarray, op_pos: np.ndarray, fusable: np.ndarray, info: Mapping[int, OpShapes | None],
                stream: np.ndarray, step: np.ndarray,
                linked: Callable[[OpShapes, OpShapes], bool]) -> list[list[tuple[int, list[int]]]]:
    """The candidate chains of the kernels in `order` (stream order), each as its (op row, kernel
    rows) nodes: a kernel continues the chain of the kernel before it when both are usable (fusable,
    shapes known), on one stream and step, and of the same op call or of an op reading the previous
    op's output (`linked`, asked once per pair of distinct op signatures). Whole-array passes; Python
    steps only per kernel of a chain."""
    if not len(order):
        return []
    rows = op_pos[order]
    shapes_of = {r: x for r, x in info.items() if x is not None}
    size = max(int(rows.max()), max(info, default=0)) + 2
    known = np.zeros(size, dtype=bool)  # op row -> shapes known; the last slot stands for row -1
    known[list(shapes_of)] = True
    usable = fusable[order] & known[np.where(rows >= 0, rows, -1)]
    sig_of: dict[object, int] = {}  # op signature (name, input shapes, output) -> code
    code_of_row: dict[int, int] = {}
    for r, shapes in shapes_of.items():
        code_of_row[r] = sig_of.setdefault((shapes[0], tuple(shapes[1]), shapes[2]), len(sig_of))
    same = np.zeros(len(order), dtype=bool)  # kernel k continues the chain of kernel k-1
    same[1:] = (usable[1:] & usable[:-1] & (stream[order[1:]] == stream[order[:-1]])
                & (step[order[1:]] == step[order[:-1]]))
    same_op = np.zeros(len(order), dtype=bool)
    same_op[1:] = rows[1:] == rows[:-1]
    decided: dict[tuple[int, int], bool] = {}
    for k in np.flatnonzero(same & ~same_op).tolist():
        a, b = int(rows[k - 1]), int(rows[k])
        key = (code_of_row[a], code_of_row[b])
        if key not in decided:
            decided[key] = linked(shapes_of[a], shapes_of[b])
        same[k] = decided[key]
    starts = np.flatnonzero(usable & ~same)
    breaks = np.append(np.flatnonzero(~same), len(order))  # a chain ends where no kernel continues it
    ends = breaks[np.searchsorted(breaks, starts, side="right")]  # one past each chain's last kernel
    out = []
    kernels, op_rows, same_call = order.tolist(), rows.tolist(), same_op.tolist()
    for s0, e0 in zip(starts.tolist(), ends.tolist(), strict=True):
        nodes: list[tuple[int, list[int]]] = []
        for k in range(s0, e0):
            if k > s0 and same_call[k]:
                nodes[-1][1].append(kernels[k])  # another kernel of the same op call
            else:
                nodes.append((op_rows[k], [kernels[k]]))
        out.append(nodes)
    return out
