"""User Triton kernels defined inside the function that launches them: every call makes a new `JITFunction` (the source read and hashed, the compile cache looked up on disk, the module loaded, a new launcher), host time the GPU waits through, where a kernel defined once at module level pays it once.

`tracekit profile` records one entry of its Triton kernel table (trace metadata `tracekit.triton_kernels`,
docs/triton-metadata.md) per kernel object, and each launch's cpu_op names its entry. A kernel
defined at module level has one entry however often it runs; one defined in the launching function
has a new entry (same file, line and name) at every call. heldout15 triton_rope_inner_jit (H100):
4 launches a step, each after ~0.7–1.0 ms of Python and inside a 2.3–3.9 ms launch op; the same
kernel defined once: ~50 µs and ~75 µs; the bare step 21.1 → 5.7 ms.

A kernel counts when, in the headline steps, its launches (grouped by file, line and name) use at
least MIN_OBJECTS entries and at least NEW_SHARE of its launches use an entry of their own. Each such
launch's host cost is the host gap before its launch call on its thread (since the thread's previous
runtime call) less KEEP_US, a module-level kernel's own launch path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.call_gaps import call_gaps, host_spans
from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_OBJECTS = 2  # kernel objects of one definition site in the steps: one is a kernel defined once
NEW_SHARE = 0.5  # of the site's launches, at least this share each on an object of its own
# host gap before a module-level Triton kernel's launch call (the launcher's argument binding and
# specialisation key): heldout15 triton_rope_inner_jit_module_kernel, 50 µs before the launch op and
# ~60 µs inside it before cuLaunchKernelEx, as profiled
KEEP_US = 110.0
TEXT_CHARS = 120  # of a recorded file name or kernel name (trace text is untrusted)

# --- columns of Patterns.triton_rebuild (one row per step × definition site) -------------------------
TR_STEP = "step"
TR_KERNEL = "kernel"  # the kernel's name, as its table entry records it
TR_SITE = "site"  # "file:line" of its definition
TR_LAUNCHES = "launches"  # its launches in the step
TR_OBJECTS = "objects"  # kernel objects those launches used
TR_HOST_US = "host_us"  # Σ over the launches of (host gap before the launch call − KEEP_US)
TRITON_REBUILD_COLUMNS = (TR_STEP, TR_KERNEL, TR_SITE, TR_LAUNCHES, TR_OBJECTS, TR_HOST_US)


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(TRITON_REBUILD_COLUMNS))


@dataclass(frozen=True)
class TritonRebuilds:
    table: pd.DataFrame
    cut_us: np.ndarray  # per rank.runtime row: host time before the call a kernel defined once saves (µs)
    spans: np.ndarray  # (start, end) of that host time, one row per call with some (host_spans)


def _site(entry: object) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    name, file, line = entry.get("name"), entry.get("file"), entry.get("line")
    if not isinstance(name, str) or not isinstance(file, str) or not isinstance(line, int) or isinstance(line, bool):
        return None
    return name[:TEXT_CHARS], f"{file.replace(chr(92), '/').rsplit('/', 1)[-1][:TEXT_CHARS]}:{line}"


def find_triton_rebuilds(rank: RankTrace, steps: StepsOf) -> TritonRebuilds:
    """TRITON_REBUILD_COLUMNS per step and definition site whose launches use a new kernel object each,
    and the host time per runtime row that defining the kernel once saves."""
    rt, ops = rank.runtime, rank.ops
    none = TritonRebuilds(empty(), np.zeros(len(rt)), np.zeros((0, 2)))
    table = (rank.meta.tracekit or {}).get(tables.TRITON_TABLE_KEY)
    if not isinstance(table, list) or len(table) < MIN_OBJECTS or not len(ops) or not len(rt):
        return none
    extra = ops[tables.OP_EXTRA].to_numpy(dtype=object)
    launches: dict[tuple[str, str], list[tuple[int, int]]] = {}  # site -> (op row, table entry)
    for row in np.flatnonzero(steps.ops >= 0).tolist():
        x = extra[row]
        if not isinstance(x, dict) or tables.USER_TRITON_KEY not in x:
            continue
        n = x[tables.USER_TRITON_KEY]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= len(table):
            continue
        site = _site(table[n - 1])
        if site is not None:
            launches.setdefault(site, []).append((row, n))
    rebuilt = {site: rows for site, rows in launches.items()
               if len({n for _, n in rows}) >= max(MIN_OBJECTS, NEW_SHARE * len(rows))}
    if not rebuilt:
        return none
    gaps = call_gaps(rank)
    rt_op = rt[tables.RT_OP].to_numpy()
    is_launch = np.isin(rt[tables.RT_KIND].to_numpy(dtype=object), tables.LAUNCH_KINDS)
    cut = np.zeros(len(rt))
    out: list[dict[str, object]] = []
    for (name, where), rows in rebuilt.items():
        per_step: dict[int, list[float]] = {}
        objects: dict[int, set[int]] = {}
        for row, n in rows:
            calls = np.flatnonzero((rt_op == row) & is_launch)
            if not len(calls):
                continue
            first = int(calls[np.argmin(rt[tables.RT_TS].to_numpy(dtype=float)[calls])])
            cut[first] = max(float(gaps[first]) - KEEP_US, 0.0)
            step = int(steps.ops[row])
            per_step.setdefault(step, []).append(float(cut[first]))
            objects.setdefault(step, set()).add(n)
        for step, cuts in sorted(per_step.items()):
            out.append({TR_STEP: step, TR_KERNEL: name, TR_SITE: where, TR_LAUNCHES: len(cuts),
                        TR_OBJECTS: len(objects[step]), TR_HOST_US: float(sum(cuts))})
    if not out:
        return none
    return TritonRebuilds(pd.DataFrame(out, columns=list(TRITON_REBUILD_COLUMNS)), cut, host_spans(rank, cut))
