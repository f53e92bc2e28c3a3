"""Per-sample loops: within a step, the same top-level ops on one thread repeated k ≥ 8 times back to back with input shapes that differ between repetitions in one data-dependent size (boxes, tokens, points per sample), which padding to the batch maximum turns into one batched call."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pandas as pd

from tracekit.analyzers.detectors.hostside import StepsOf
from tracekit.analyzers.detectors.toplevel import (
    StepOps,
    TopLevel,
    repeated_block,
    step_sequences,
    text_codes,
)
from tracekit.trace import tables
from tracekit.trace.model import RankTrace

MIN_SAMPLES = 8  # repetitions per step: fewer is a short loop, not a batch of samples (issue's threshold)
# A loop body of at least this many launching ops: one or two ops repeated over tensors of different
# sizes is a per-tensor loop (foreach_loops' ground; a nan_to_num per gradient in the HTA trace_diff
# traces of /work/shared/traces), not a per-sample computation such as a loss.
MIN_BODY_OPS = 3
# Same-shaped repetitions joined by a cat/stack after the loop are slices of one batch whatever their
# body's length (a per-tensor loop's tensors differ in size): a body of two ops is one (held-out
# query_loop: `corpus @ q` and its top-k for each of 128 queries, then torch.stack).
MIN_JOINED_OPS = 2
# The varying size takes at least this many values: a size that takes two is structure, not data (a
# layer stack whose last layer is the narrow head, as train_optimizer_loop's 256 → 10; self- and
# cross-attention of two fixed lengths).
MIN_SIZES = 3
MAX_LEN_VALUES = 10_000  # integers per repetition's shapes that are compared (untrusted traces: bounded)
# A loop over same-shaped slices (images of one size, chunks of a batch) has no varying size; it is a
# per-sample loop when the op that follows its last repetition joins their outputs (torch.cat / stack,
# held-out gpu_aug_loop: 256 per-image augmentations then a cat; transformers' apply_chunking_to_forward:
# 32 feed-forward chunks then a cat). A layer stack repeats same-shaped blocks too, but feeds each into
# the next and joins nothing. Such a loop's "size" is 1 for every repetition (nothing to pad).
JOINS = frozenset({"aten::cat", "aten::stack", "aten::_cat", "aten::concat", "aten::concatenate"})
# ... or when each repetition ends by copying its sample into a slot of one preallocated batch
# (`out[i] = crop.flip(-1) if flip else crop`, held-out cifar_per_sample_augment, H100: 1,024 crops a
# step, a flip in about half, so the body varies; one batched gather saved 16.3 of 23.2 ms unprofiled).
SLOT_WRITE = "aten::copy_"
MAX_SLOT_OPS = 3  # launching ops per repetition, the copy included: a per-sample transform or two, not a layer
# ... or when a scalar argument of one of the body's ops counts through the repetitions (the loop's
# index as a value, recorded in Concrete Inputs: `for c in range(C): (pred == c) & (gt == c)`, held-out
# segmentation_per_class_iou_loop, H100: 150 classes, 8 kernels each; one scatter_add_ into a confusion
# matrix took the bare step from 16.0 to 1.1 ms). A body with a GEMM or a convolution is a model run per
# value (a sampler's timesteps, each on the previous one's output), not one computation per value.
# ... or, for a body of one launching op, when each repetition reads a view of one same-shaped tensor,
# taken right before it (`h[b, start:end].mean(0)` per word, held-out ner_word_pooling_loop, H100: ~2,200
# means of 1-9 sub-word rows a step from a (16, 256, 768) batch; one segment mean took the bare step from
# 30.7 to 3.4 ms). A per-tensor loop (a norm per gradient) reads whole tensors of differing shapes.
VIEWS = frozenset({"aten::select", "aten::slice", "aten::narrow", "aten::__getitem__"})
VIEW_REACH = 16  # op rows looked back from a repetition for its view (select, its as_strided, slice, ...)
COMPILED_REGION = "Torch-Compiled Region"  # torch.compile's graph call (detectors/compiled.py REGION)
MODEL_OPS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|_int_mm|einsum|conv\w*|_convolution|cudnn_convolution\w*|"
                       r"scaled_dot_product\w*|_scaled_dot_product\w*|_flash\w*|_efficient\w*|embedding)$")

# --- columns of Patterns.sample_loops (one row per step × thread with a per-sample loop) ------------
SL_STEP = "step"
SL_THREAD = "thread"
SL_SAMPLES = "samples"  # repetitions of the loop body in the step
SL_OPS = "ops"  # the body's top-level ops that launch work, in words
SL_MIN = "size_min"  # the varying dimension's smallest value over the repetitions
SL_MAX = "size_max"  # ... and its largest
SL_MEAN = "size_mean"  # ... and its mean
SL_LAUNCHES = "launches"  # launch calls of all repetitions
SL_HOST_US = "host_us"  # host time from the first repetition's start to the last one's end
SL_GPU_US = "gpu_us"  # GPU time of the kernels the repetitions launched
SL_COUNTER = "counter"  # one computation per value of a counter (counter_loop): one pass does every value's work once
SL_SLICED = "sliced"  # each repetition on the slice of one tensor that the counter indexes (counted_views)
SAMPLE_COLUMNS = (SL_STEP, SL_THREAD, SL_SAMPLES, SL_OPS, SL_MIN, SL_MAX, SL_MEAN, SL_LAUNCHES, SL_HOST_US, SL_GPU_US,
                  SL_COUNTER, SL_SLICED)
OPS_CHARS = 120
# The autograd engine's node calls carry no input shapes: a block of them repeated as many times as a
# per-sample loop of the same step is that loop's backward (one node chain per sample, run in reverse).
BACKWARD = "autograd::engine::evaluate_function"  # of SL_OPS (trace names are untrusted text: kept short)
# A backward that runs all samples' chains as one graph interleaves them (the engine's order, not the
# loop's): each node name then appears a multiple of k times, give or take the nodes shared by all
# samples (the loss, a stack): within 5 % or 2 calls (H100 ho8_graph_loop: AddmmBackward0 514, TBackward0
# 508 for 128 graphs × 4 layers); such nodes must make up 80 % of the thread's launching calls.
INTERLEAVE_SLACK = 0.05
BACKWARD_COVER = 0.8


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(SAMPLE_COLUMNS))


def _ints(value: object) -> Iterator[int]:
    """The integers of a (nested) list of input dims, in order."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _ints(v)


def _flat_dims(rank: RankTrace, rows: list[int], memo: dict[int, list[int]]) -> list[list[int]]:
    """Per op row, the integers of its Input Dims (_ints), flattened once per distinct value (`memo`,
    by identity: equal recorded values are one shared object, kept alive by the rank)."""
    out = []
    for dims in rank.input_values(np.asarray(rows, dtype=np.int64), tables.OP_INPUT_DIMS):
        got = memo.get(id(dims))
        if got is None:
            got = memo[id(dims)] = list(_ints(dims))
        out.append(got)
    return out


def varying_size(shapes: list[list[int]]) -> list[int] | None:
    """Per repetition, the one size in which their shapes differ (every differing position takes that
    value in its repetition); None when the shapes are the same in all (a fixed-shape loop), differ in
    length, differ in two sizes or more, or the size takes fewer than MIN_SIZES values, or it grows by
    the same stride every repetition (autoregressive decoding: each token attends over one more cached
    position, 1025–1040 over 16 tokens on the H200 held-out int8_dequant decode; its tokens depend on
    each other and cannot be padded into one batch)."""
    if not shapes or any(len(s) != len(shapes[0]) for s in shapes):
        return None
    grid = np.asarray(shapes, dtype=np.int64)
    varying = np.flatnonzero((grid != grid[0]).any(axis=0))
    if not len(varying):
        return None
    cols = grid[:, varying]
    if not (cols == cols[:, :1]).all():
        return None  # two sizes vary independently (or one is derived from another): not one padded dim
    if len(np.unique(cols[:, 0])) < MIN_SIZES:
        return None
    steps = np.diff(cols[:, 0])
    if (steps == steps[0]).all() and steps[0] > 0:
        return None  # one more position each repetition: a generation loop (token t reads t's cache), not samples
    return cols[:, 0].tolist()


def backward_nodes(names: list[str], k: int) -> np.ndarray | None:
    """On a thread of autograd node calls (BACKWARD), the nodes of a k-sample loop's backward when the
    engine interleaves the samples' chains (one graph over all samples: no repeated block): per node
    name, a count within INTERLEAVE_SLACK of a multiple of k (k or more); None unless such nodes are
    at least BACKWARD_COVER of the thread's launching calls (a per-sample loss after a shared model
    leaves the model's own nodes the larger part: its backward is not the loop's)."""
    if not names or sum(n.startswith(BACKWARD) for n in names) < BACKWARD_COVER * len(names):
        return None
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    kept = {n for n, c in counts.items() if n.startswith(BACKWARD) and c >= k
            and abs(c - round(c / k) * k) <= max(2, INTERLEAVE_SLACK * c)}
    mask = np.fromiter((n in kept for n in names), dtype=bool, count=len(names))
    return mask if mask.sum() >= BACKWARD_COVER * len(names) else None


def sliced_views(rank: RankTrace, body: np.ndarray, names: np.ndarray, memo: dict[int, list[int]]) -> bool:
    """Whether every repetition of a one-op `body` (repeats × 1 op rows, in time order) follows a
    top-level VIEWS op of its thread since the previous repetition (within VIEW_REACH op rows), the
    first of them reading one shape in all repetitions (slices of one batch tensor, VIEWS)."""
    ops = rank.ops
    depth, tid = ops[tables.OP_DEPTH].to_numpy(), ops[tables.OP_TID].to_numpy()
    firsts = []
    prev = -1
    for row in body[:, 0].tolist():
        view = next((r for r in range(max(prev + 1, row - VIEW_REACH), row)
                     if depth[r] == 0 and tid[r] == tid[row] and str(names[r]) in VIEWS), None)
        if view is None:
            return False
        firsts.append(view)
        prev = row
    read = _flat_dims(rank, firsts, memo)
    return bool(read[0]) and all(dims == read[0] for dims in read)


def _loop(rank: RankTrace, seq: np.ndarray, names: np.ndarray, memo: dict[int, list[int]],
          one_op: bool = False) -> tuple[tuple[int, int, int] | None, tuple[np.ndarray, list[int] | None] | None]:
    """(the repeated block of `seq` as (start, period, repeats) or None; (its repetitions' op rows, their
    varying sizes or None for an autograd thread's shapeless nodes) when it is a per-sample loop, else None).
    `one_op`: a body of one launching op may be a loop too (over views of one tensor, VIEWS)."""
    found = repeated_block(text_codes([str(n) for n in names[seq].tolist()]))
    if found is None or found[2] < MIN_SAMPLES:
        return found, None
    start, period, repeats = found
    body = seq[start:start + period * repeats].reshape(repeats, period)
    flat = _flat_dims(rank, body.ravel().tolist(), memo)
    shapes = [[v for i in range(k * period, (k + 1) * period) for v in flat[i]][:MAX_LEN_VALUES]
              for k in range(repeats)]
    if period < MIN_JOINED_OPS:
        one = (one_op and not MODEL_OPS.match(str(names[body[0, 0]]))
               and sliced_views(rank, body, names, memo))
        sizes = varying_size(shapes) if one else None
        return found, (body, sizes) if sizes is not None else None
    sizes = varying_size(shapes) if period >= MIN_BODY_OPS else None
    after = start + period * repeats
    if (sizes is None and any(shapes) and all(x == shapes[0] for x in shapes) and after < len(seq)
            and str(names[seq[after]]) in JOINS and not JOINS.intersection(str(n) for n in names[body[0]])):
        sizes = [1] * repeats  # same-shaped slices joined after the loop: stacked, not padded
    if (sizes is None and period >= MIN_BODY_OPS and any(shapes) and all(x == shapes[0] for x in shapes)
            and counter_loop(rank, body, names)):
        sizes = CounterSizes([1] * repeats)  # one computation per value of the loop's counter
    if (sizes is None and period >= MIN_BODY_OPS and any(shapes) and all(x == shapes[0] for x in shapes)
            and counted_views(rank, body, names)):
        sizes = SlicedSizes([1] * repeats)  # one computation per slice the loop's counter selects
    if period < MIN_BODY_OPS:
        return found, (body, sizes) if sizes is not None else None
    if sizes is not None or (all(names[r].startswith(BACKWARD) for r in body.ravel().tolist()) and not any(shapes)):
        return found, (body, sizes)
    return found, None


class CounterSizes(list[int]):
    """The sizes (all 1) of a loop over a counter's values (counter_loop): one pass does them all."""


class SlicedSizes(list[int]):
    """The sizes (all 1) of a loop over the slices of one tensor that a counter indexes (counted_views):
    one broadcast pass over the whole tensor does every slice's work."""


def _number(text: object) -> float | None:
    """A Concrete Inputs entry as a number (an int or float scalar), else None."""
    if not isinstance(text, str) or not text or len(text) > 32:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def _counts(concrete: list[object]) -> bool:
    """Whether one scalar position of these Concrete Inputs (one per repetition) takes distinct values
    in a constant stride over the repetitions (a loop index)."""
    width = min((len(c) if isinstance(c, list) else 0) for c in concrete)
    for i in range(width):
        values = [_number(c[i]) if isinstance(c, list) else None for c in concrete]
        if any(v is None for v in values):
            continue
        steps = np.diff(np.asarray(values, dtype=float))
        if len(steps) and steps[0] != 0 and np.allclose(steps, steps[0]):
            return True
    return False


def counter_loop(rank: RankTrace, body: np.ndarray, names: np.ndarray) -> bool:
    """Whether the repetitions of `body` (repeats × period op rows) are one computation per value of a
    counter: one op position's scalar input takes `repeats` distinct values in a constant stride over
    the repetitions (the loop index), and the body runs no MODEL_OPS."""
    if any(MODEL_OPS.match(str(n)) for n in names[body[0]].tolist()):
        return False
    return any(_counts(list(rank.input_values(body[:, j], tables.OP_CONCRETE_INPUTS))) for j in range(body.shape[1]))


def counted_views(rank: RankTrace, body: np.ndarray, names: np.ndarray) -> bool:
    """Whether each repetition of `body` (repeats × period launching op rows) reads slices that the loop
    counter indexes: the top-level VIEWS ops of its thread since the previous repetition's last op (the
    first repetition left out: nothing bounds it) are as many in every repetition, and one of them takes
    an index that counts (`for c in range(C): x[:, c] = f(raw[:, c], gain[c])`, held-out
    hyperspectral_per_band_loop, H200: 200 bands × 8 kernels; one broadcast pass took the bare step from
    30.6 to 4.7 ms). A body with MODEL_OPS is a model run per slice, not one computation per slice."""
    if body.shape[0] < MIN_SAMPLES or any(MODEL_OPS.match(str(n)) or str(n).startswith(COMPILED_REGION)
                                          for n in names[body[0]].tolist()):
        return False  # a compiled region is a model run too (a policy per rollout step, held-out ppo_rollout)
    ops = rank.ops
    depth, tid = ops[tables.OP_DEPTH].to_numpy(), ops[tables.OP_TID].to_numpy()
    thread = tid[body[0, 0]]
    views: list[list[int]] = []
    for k in range(1, body.shape[0]):
        lo, hi = int(body[k - 1, -1]) + 1, int(body[k, -1]) + 1
        span = np.arange(lo, hi)
        picked = span[(depth[lo:hi] == 0) & (tid[lo:hi] == thread)]
        views.append([int(r) for r in picked if str(names[r]) in VIEWS])
    if not views[0] or any(len(v) != len(views[0]) for v in views):
        return False
    grid = np.asarray(views, dtype=np.int64)
    return any(_counts(list(rank.input_values(grid[:, j], tables.OP_CONCRETE_INPUTS))) for j in range(grid.shape[1]))


def slot_loop(rank: RankTrace, seq: np.ndarray, names: np.ndarray, memo: dict[int, list[int]]
              ) -> tuple[list[np.ndarray], list[int]] | None:
    """A loop that writes each sample into its slot of one batch (`out[i] = f(x[i])`): the longest run
    of at least MIN_SAMPLES `aten::copy_` calls of one shape (destination and source alike: a whole
    sample, not a broadcast) in `seq`, each after at most MAX_SLOT_OPS − 1 ops of the sample's shape
    (optional per-sample ops such as a random flip vary the body, so no block repeats exactly). Its
    repetitions (op rows, the copy last) with size 1 each (nothing to pad); None when there is none."""
    copies = np.flatnonzero(names[seq] == SLOT_WRITE)
    if len(copies) < MIN_SAMPLES:
        return None
    flat = _flat_dims(rank, seq.tolist(), memo)
    best: list[np.ndarray] = []
    run: list[np.ndarray] = []
    shape: list[int] | None = None
    prev = -1
    for pos in copies.tolist():
        dims = flat[pos]
        half = len(dims) // 2
        sample = dims[:half]
        alike = half > 0 and sample == dims[half:2 * half]
        first = pos  # the body: the copy and the ops of the sample's shape right before it
        while first > max(prev + 1, pos - MAX_SLOT_OPS + 1) and flat[first - 1] and flat[first - 1][:half] == sample:
            first -= 1
        body = seq[first:pos + 1]
        joined = bool(JOINS.intersection(str(n) for n in names[body].tolist()))
        if run and alike and not joined and sample == shape and first == prev + 1:
            run.append(body)
        else:
            best = run if len(run) > len(best) else best
            run, shape = ([body], sample) if alike and not joined else ([], None)
        prev = pos
    best = run if len(run) > len(best) else best
    return (best, [1] * len(best)) if len(best) >= MIN_SAMPLES else None


def _loops(rank: RankTrace, seq: np.ndarray, names: np.ndarray, memo: dict[int, list[int]]) -> list[tuple[np.ndarray | list[np.ndarray], list[int] | None]]:
    """The per-sample loops of one thread's launching ops `seq`: its repeated block, and where that is
    not a forward per-sample loop (a layer stack), the loop repeated inside each of its repetitions
    (transformers' chunked feed-forward: 32 chunks inside each of 6 layers)."""
    found, loop = _loop(rank, seq, names, memo, one_op=True)
    if loop is None:
        slots = slot_loop(rank, seq, names, memo)
        if slots is not None:
            return [slots]
    out: list[tuple[np.ndarray | list[np.ndarray], list[int] | None]] = [loop] if loop is not None else []
    if found is None or (loop is not None and loop[1] is not None):
        return out
    start, period, repeats = found
    if period < MIN_SAMPLES * MIN_BODY_OPS:
        return out
    for i in range(repeats):
        _, inner = _loop(rank, seq[start + i * period:start + (i + 1) * period], names, memo)
        if inner is not None:
            out.append(inner)
    return out


def find_sample_loops(rank: RankTrace, steps: StepsOf, top: TopLevel | None = None,
                      seqs: tuple[StepOps, ...] | None = None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One row per step and thread whose launching top-level ops are one block repeated k ≥ MIN_SAMPLES
    times back to back, by op names, with shapes that vary in one size (SAMPLE_COLUMNS); and per
    rank.gpu row the varying size of the repetition that launched it (0: launched by none) and its
    duration (µs; NaN outside the loops). `top` and `seqs` are TopLevel.of(rank) and step_sequences of
    it (computed here when not given)."""
    ops, rt, gpu = rank.ops, rank.runtime, rank.gpu
    in_loop = np.zeros(len(gpu), dtype=np.int64)
    if not len(ops) or not len(rt) or not len(gpu):
        return empty(), in_loop, np.full(len(gpu), np.nan)
    top = top if top is not None else TopLevel.of(rank)
    seqs = seqs if seqs is not None else step_sequences(rank, steps, top)
    launches, gpu_top = top.launches, top.gpu_top
    names = ops[tables.OP_NAME].to_numpy(dtype=object)
    ts, end = ops[tables.OP_TS].to_numpy(dtype=float), ops[tables.OP_END].to_numpy(dtype=float)
    gpu_dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    memo: dict[int, list[int]] = {}
    rows = []
    for step_ops in seqs:
        step = step_ops.step
        blocks = []  # (thread, repetitions, their varying sizes or None where the ops carry no shapes)
        for thread, working in step_ops.threads:
            seq = working[launches[working] > 0]  # the thread's ops that launch work (not only syncs)
            if len(seq) < MIN_SAMPLES * MIN_JOINED_OPS:
                continue  # too short for MIN_SAMPLES repetitions of a MIN_JOINED_OPS body
            for body, sizes in _loops(rank, seq, names, memo):
                blocks.append((thread, body, sizes))
        forward = {len(body): sizes for _, body, sizes in blocks if sizes is not None}
        found_threads = {thread for thread, _, _ in blocks}
        for k, sizes in list(forward.items())[:1]:  # an interleaved backward of the loop's k samples
            for thread, working in step_ops.threads:
                seq = working[launches[working] > 0]
                picked = backward_nodes([str(n) for n in names[seq].tolist()], k) if thread not in found_threads else None
                if picked is not None:
                    mean = max(round(float(np.mean(sizes))), 1)
                    blocks.append((thread, seq[picked].reshape(1, -1), [mean]))
        for thread, body, sizes in blocks:
            if sizes is None:  # the autograd thread's nodes of a per-sample loop: the same k, in reverse order
                if len(body) not in forward:
                    continue
                sizes = forward[len(body)][::-1]
            covered = np.concatenate(list(body))
            samples = len(body) if len(body) > 1 else next(iter(forward))  # an interleaved backward: its loop's k
            size_of = np.zeros(len(ops), dtype=np.int64)  # per op row its repetition's size (one pass, not one isin each)
            for rep, size in zip(body, sizes, strict=True):
                size_of[rep] = max(int(size), 1)
            picked = np.where(gpu_top >= 0, size_of[np.maximum(gpu_top, 0)], 0)
            in_loop = np.where(picked > 0, picked, in_loop)
            hit = np.isin(gpu_top, covered)
            counter = isinstance(sizes, CounterSizes)
            rows.append({SL_STEP: int(step), SL_THREAD: int(thread), SL_SAMPLES: samples, SL_COUNTER: bool(counter),
                         SL_SLICED: isinstance(sizes, SlicedSizes),
                         SL_OPS: " → ".join(str(n).removeprefix("aten::") for n in names[max(body, key=len)])[:OPS_CHARS],
                         SL_MIN: int(min(sizes)), SL_MAX: int(max(sizes)), SL_MEAN: float(np.mean(sizes)),
                         SL_LAUNCHES: int(launches[covered].sum()),
                         SL_HOST_US: float(end[covered].max() - ts[covered].min()),
                         SL_GPU_US: float(gpu_dur[hit].sum())})
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS)), in_loop, np.where(in_loop > 0, gpu_dur, np.nan)
