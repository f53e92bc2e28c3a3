"""Which table each event of a chunk goes to, by vectorised passes over per-field codes (no loop per event)."""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import numpy as np

from tracekit.trace import tables
from tracekit.trace.reader import Event
from tracekit.trace.values import object_array

TABLES = ("gpu", "ops", "runtime", "annotations")  # codes 0..3
FLOWS, PYTHON, OTHER = 4, 5, 6  # codes of the other categories
_CAT = operator.attrgetter("cat")
_PH = operator.attrgetter("ph")
_NAME = operator.attrgetter("name")
_ID = operator.attrgetter("id")


def category_code(cat: str | None) -> int:
    """The routing code of an event category (tables.CATEGORY_TABLE)."""
    table = tables.CATEGORY_TABLE.get(cat or "")
    if table is None:
        return PYTHON if cat == tables.PYTHON_CATEGORY else OTHER
    return FLOWS if table == "flows" else TABLES.index(table)


@dataclass
class Routed:
    """The events of one chunk by destination, each list in file order."""

    tables: dict[str, list[Event]]  # gpu, ops, runtime, annotations
    rows: dict[str, np.ndarray]  # position in the chunk of each event of tables[...], flows, memory, python
    flows: list[Event]
    memory: list[Event]
    python: list[Event]
    skipped: int  # complete events of a table category without a start time


class Router:
    """Routes chunks; remembers per category its code and per op name whether it is a ProfilerStep#N."""

    def __init__(self) -> None:
        self._codes: dict[str | None, int] = {}
        self._steps: dict[str, bool] = {}

    def route(self, events: list[Event], cats: list[str | None], has_ts: np.ndarray) -> Routed:
        """The same routing as one test per event: a complete ('X') event of a table category with a
        start time goes to its table (a cpu_op named ProfilerStep#N to annotations, as the 2021
        schema records steps), 's'/'f' flow events with a start time and an int id to flows, a
        [memory] event of no table category with a start time to memory, a complete
        python_function event with a start time to python."""
        n = len(events)
        codes = self._codes
        for cat in set(cats).difference(codes):
            codes[cat] = category_code(cat)
        code = np.fromiter(map(codes.__getitem__, cats), dtype=np.int8, count=n)
        phs = list(map(_PH, events))
        is_x = np.fromiter(map(operator.eq, phs, itertools.repeat("X")), dtype=bool, count=n)
        every = object_array(events)
        # (a duration < 0 cannot reach here: reader.Duration rejects it when decoding)
        in_table = (code < FLOWS) & is_x
        skipped = int(np.count_nonzero(in_table & ~has_ts))
        good = in_table & has_ts
        ops = np.flatnonzero(good & (code == 1))
        annotations = good & (code == 3)
        if len(ops):
            steps = self._steps
            names = list(map(_NAME, every[ops].tolist()))
            for name in set(names).difference(steps):
                steps[name] = tables.STEP_NAME_RE.match(name) is not None
            step = np.fromiter(map(steps.__getitem__, names), dtype=bool, count=len(names))
            if step.any():
                annotations[ops[step]] = True
                ops = ops[~step]
        rows = {"gpu": np.flatnonzero(good & (code == 0)), "ops": ops, "runtime": np.flatnonzero(good & (code == 2)),
                "annotations": np.flatnonzero(annotations)}
        routed = {table: every[r].tolist() for table, r in rows.items()}
        flows = np.flatnonzero((code == FLOWS) & has_ts)
        if len(flows):
            candidates = every[flows].tolist()
            keep = np.fromiter((e.ph in ("s", "f") and e.id.__class__ is int for e in candidates), dtype=bool,
                               count=len(candidates))
            flows = flows[keep]
        memory = np.zeros(n, dtype=bool)
        rest = np.flatnonzero((code >= PYTHON) & has_ts)
        if len(rest):
            memory[rest] = np.fromiter(map(operator.eq, map(_NAME, every[rest].tolist()),
                                           itertools.repeat(tables.MEMORY_EVENT)), dtype=bool, count=len(rest))
        rows["flows"] = flows
        rows["memory"] = np.flatnonzero(memory)
        rows["python"] = np.flatnonzero((code == PYTHON) & is_x & has_ts & ~memory)
        return Routed(tables=routed, rows=rows, flows=every[flows].tolist(), memory=every[rows["memory"]].tolist(),
                      python=every[rows["python"]].tolist(), skipped=skipped)
