"""Sequence alignment of GPU work: replayed kernels against captured launches or eager kernels."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import accumulate

SEED = 4  # length of the token runs that vote for where a replay sits in a long eager sequence
MAX_SEEDS = 64  # seeds taken from one replayed sequence
MAX_HITS = 2000  # occurrences of one seed considered
# Work allowed for the exact (difflib) alignment of one pair of sequences, in inner-loop steps: a
# base plus a share per item. Sequences with few distinct items (kinds alone, one kernel repeated
# per layer) make the exact search quadratic or worse; past the budget they are aligned in order
# instead (_in_order_blocks), in time linear in their lengths.
EXACT_BASE = 2_000_000
EXACT_PER_ITEM = 400
RESYNC_LOOKAHEAD = 16  # items looked ahead on each side to find where two sequences agree again

Block = tuple[int, int, int]  # a[i:i+k] == b[j:j+k]


class Budget:
    """Steps left for exact alignment: one align() call's, or shared by the calls of one join."""

    def __init__(self, n: int) -> None:
        self.left = EXACT_BASE + EXACT_PER_ITEM * n

    def spend(self, steps: int) -> bool:
        self.left -= steps
        return self.left >= 0


def align(a: Sequence[Hashable], b: Sequence[Hashable], a_kinds: Sequence[str],
          b_kinds: Sequence[str], budget: Budget | None = None) -> list[tuple[int, int]]:
    """Pairs (i, j) aligning a[i] with b[j], in order: equal tokens first (longest common blocks),
    then, inside each gap between them, items of the same kind (memcpy with memcpy, kernel with
    kernel): in order when the gap has the same kinds on both sides, else by a second alignment of
    the kinds (kinds may carry a class, 'kernel:gemm'). Tolerates extra or missing items.
    The longest-block search is difflib's; where it would exceed its budget, blocks are found in
    order with a bounded look-ahead instead (linear time). `budget`: shared with other calls
    (default: this call's own, sized by the two lengths)."""
    budget = Budget(len(a) + len(b)) if budget is None else budget
    pairs: list[tuple[int, int]] = []
    i0 = j0 = 0
    for i, j, n in _blocks(a, b, budget):
        _fill(pairs, i0, i, j0, j, a_kinds, b_kinds, budget)
        pairs.extend((i + k, j + k) for k in range(n))
        i0, j0 = i + n, j + n
    return pairs


def _fill(pairs: list[tuple[int, int]], i0: int, i1: int, j0: int, j1: int,
          a_kinds: Sequence[str], b_kinds: Sequence[str], budget: Budget) -> None:
    """Align the gap a[i0:i1] / b[j0:j1] by kind alone."""
    if i1 <= i0 or j1 <= j0:
        return
    ka, kb = a_kinds[i0:i1], b_kinds[j0:j1]
    if i1 - i0 == j1 - j0 and [_base(k) for k in ka] == [_base(k) for k in kb]:
        pairs.extend((i0 + k, j0 + k) for k in range(i1 - i0))  # same count, same kinds: in order
        return
    for i, j, n in _blocks(ka, kb, budget):
        pairs.extend((i0 + i + k, j0 + j + k) for k in range(n))


def _base(kind: str) -> str:
    """'kernel' of 'kernel:gemm': a finer class of a kind only breaks ties."""
    return kind.split(":", 1)[0]


def _blocks(a: Sequence[Hashable], b: Sequence[Hashable], budget: Budget) -> list[Block]:
    """Matching blocks of a and b, ending with (len(a), len(b), 0): difflib's while the budget
    lasts, else in order (the budget is then spent, so later gaps go in order at once)."""
    exact = _exact_blocks(a, b, budget)
    if exact is None:
        budget.left = -1
        return _in_order_blocks(a, b)
    return exact


def _exact_blocks(a: Sequence[Hashable], b: Sequence[Hashable], budget: Budget) -> list[Block] | None:
    """difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks() as tuples (same
    algorithm, no junk), or None as soon as the work would exceed the budget."""
    b2j: dict[Hashable, list[int]] = {}
    for j, x in enumerate(b):
        b2j.setdefault(x, []).append(j)
    nothing: list[int] = []
    # cost[i]: steps the inner loop may take for a[alo:i] (an upper bound: every occurrence in b)
    cost = [0, *accumulate(len(b2j.get(x, nothing)) + 1 for x in a)]
    if not budget.spend(len(a) + len(b)):
        return None
    queue = [(0, len(a), 0, len(b))]
    found: list[Block] = []
    while queue:
        alo, ahi, blo, bhi = queue.pop()
        if not budget.spend(cost[ahi] - cost[alo]):
            return None
        besti, bestj, bestsize = alo, blo, 0
        j2len: dict[int, int] = {}
        for i in range(alo, ahi):
            j2lenget = j2len.get
            newj2len: dict[int, int] = {}
            for j in b2j.get(a[i], nothing):
                if j < blo:
                    continue
                if j >= bhi:
                    break
                k = newj2len[j] = j2lenget(j - 1, 0) + 1
                if k > bestsize:
                    besti, bestj, bestsize = i - k + 1, j - k + 1, k
            j2len = newj2len
        if bestsize:
            found.append((besti, bestj, bestsize))
            if alo < besti and blo < bestj:
                queue.append((alo, besti, blo, bestj))
            if besti + bestsize < ahi and bestj + bestsize < bhi:
                queue.append((besti + bestsize, ahi, bestj + bestsize, bhi))
    found.sort()
    return _merged(found, len(a), len(b))


def _merged(found: list[Block], la: int, lb: int) -> list[Block]:
    """Adjacent blocks joined (as difflib does), then the (la, lb, 0) sentinel."""
    out: list[Block] = []
    i1 = j1 = k1 = 0
    for i2, j2, k2 in found:
        if i1 + k1 == i2 and j1 + k1 == j2:
            k1 += k2
        else:
            if k1:
                out.append((i1, j1, k1))
            i1, j1, k1 = i2, j2, k2
    if k1:
        out.append((i1, j1, k1))
    out.append((la, lb, 0))
    return out


def _in_order_blocks(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Block]:
    """Matching blocks found walking both sequences in order: runs of equal items are matched;
    where they differ, the walk resumes at the nearest pair of equal items (fewest items skipped),
    looking RESYNC_LOOKAHEAD items ahead on each side for the next occurrence on the other."""
    where_a: dict[Hashable, list[int]] = {}
    where_b: dict[Hashable, list[int]] = {}
    for i, x in enumerate(a):
        where_a.setdefault(x, []).append(i)
    for j, x in enumerate(b):
        where_b.setdefault(x, []).append(j)
    out: list[Block] = []
    i = j = 0
    la, lb = len(a), len(b)
    while i < la and j < lb:
        if a[i] == b[j]:
            k = 1
            while i + k < la and j + k < lb and a[i + k] == b[j + k]:
                k += 1
            out.append((i, j, k))
            i, j = i + k, j + k
            continue
        best: tuple[int, int, int] | None = None  # (items skipped, next i, next j)
        for d in range(min(RESYNC_LOOKAHEAD, la - i)):
            hits = where_b.get(a[i + d], ())
            p = bisect_left(hits, j)
            if p < len(hits) and (best is None or d + hits[p] - j < best[0]):
                best = (d + hits[p] - j, i + d, hits[p])
        for d in range(min(RESYNC_LOOKAHEAD, lb - j)):
            hits = where_a.get(b[j + d], ())
            p = bisect_left(hits, i)
            if p < len(hits) and (best is None or d + hits[p] - i < best[0]):
                best = (d + hits[p] - i, hits[p], j + d)
        if best is None:
            break  # nothing ahead on either side occurs on the other
        i, j = best[1], best[2]
    out.append((la, lb, 0))
    return out


class SeedIndex:
    """Where each run of SEED tokens occurs in a long sequence (the eager kernels of a trace)."""

    def __init__(self, tokens: Sequence[Hashable]) -> None:
        self.tokens = tokens
        self.where: dict[tuple, list[int]] = {}
        for p in range(len(tokens) - SEED + 1):
            self.where.setdefault(tuple(tokens[p:p + SEED]), []).append(p)

    def window(self, query: Sequence[Hashable]) -> tuple[int, int] | None:
        """The slice [start, stop) of the indexed sequence where `query` most likely occurs: the
        offset most seeds of `query` vote for, widened by a quarter of its length each side."""
        n = len(query)
        if n < SEED:
            return None
        step = max(1, (n - SEED + 1) // MAX_SEEDS)
        votes: Counter[int] = Counter()
        for i in range(0, n - SEED + 1, step):
            hits = self.where.get(tuple(query[i:i + SEED]), ())
            if len(hits) <= MAX_HITS:
                votes.update(p - i for p in hits)
        if not votes:
            return None
        offset = votes.most_common(1)[0][0]
        slack = n // 4 + SEED
        return max(0, offset - slack), min(len(self.tokens), offset + n + slack)
