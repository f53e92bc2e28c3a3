"""Sequence alignment of GPU work: replayed kernels against captured launches or eager kernels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from difflib import SequenceMatcher

SEED = 4  # length of the token runs that vote for where a replay sits in a long eager sequence
MAX_SEEDS = 64  # seeds taken from one replayed sequence
MAX_HITS = 2000  # occurrences of one seed considered


def align(a: Sequence[Hashable], b: Sequence[Hashable], a_kinds: Sequence[str],
          b_kinds: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs (i, j) aligning a[i] with b[j], in order: equal tokens first (longest common blocks),
    then, inside each gap between them, items of the same kind (memcpy with memcpy, kernel with
    kernel): in order when the gap has the same kinds on both sides, else by a second alignment of
    the kinds (kinds may carry a class, 'kernel:gemm'). Tolerates extra or missing items."""
    pairs: list[tuple[int, int]] = []
    i0 = j0 = 0
    for i, j, n in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        _fill(pairs, i0, i, j0, j, a_kinds, b_kinds)
        pairs.extend((i + k, j + k) for k in range(n))
        i0, j0 = i + n, j + n
    return pairs


def _fill(pairs: list[tuple[int, int]], i0: int, i1: int, j0: int, j1: int,
          a_kinds: Sequence[str], b_kinds: Sequence[str]) -> None:
    """Align the gap a[i0:i1] / b[j0:j1] by kind alone."""
    if i1 <= i0 or j1 <= j0:
        return
    ka, kb = a_kinds[i0:i1], b_kinds[j0:j1]
    if i1 - i0 == j1 - j0 and [_base(k) for k in ka] == [_base(k) for k in kb]:
        pairs.extend((i0 + k, j0 + k) for k in range(i1 - i0))  # same count, same kinds: in order
        return
    for i, j, n in SequenceMatcher(None, ka, kb, autojunk=False).get_matching_blocks():
        pairs.extend((i0 + i + k, j0 + j + k) for k in range(n))


def _base(kind: str) -> str:
    """'kernel' of 'kernel:gemm': a finer class of a kind only breaks ties."""
    return kind.split(":", 1)[0]


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
