"""Adversarial trace shapes of a given size, for the scaling checks of the fuzz corpus."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracebuilder import TraceBuilder


def same_timestamps(n: int) -> dict:
    """n/3 ops, each with a launch and a kernel, every event at the same instant with the same length."""
    b = TraceBuilder()
    for _ in range(n // 3):
        ext = b.op("aten::add", 1000.0, 0.0)
        b.launch(1000.0, 0.0, "vectorized_elementwise_kernel<4, add>", 1000.0, 0.0, ext=ext)
    return b.document()


def deep_nesting(n: int) -> dict:
    """n/3 ops each inside the one before (n/3 deep), each launching one kernel before its child starts."""
    b = TraceBuilder()
    depth = n // 3
    for d in range(depth):
        ext = b.op(f"aten::op{d % 7}", 1000.0 + 3 * d, 6.0 * (depth - d))
        b.launch(1000.5 + 3 * d, 1.0, "ampere_sgemm_128x64_nn", 1000.0 + 3 * d, 2.0, ext=ext)
    return b.document()


def deep_distinct(n: int) -> dict:
    """deep_nesting with every op's name its own: no ancestor shares an op's key, so a search for one
    climbs to the top (one level per pass was quadratic: 133,000 deep took 57 s)."""
    b = TraceBuilder()
    depth = n // 3
    for d in range(depth):
        ext = b.op(f"aten::op{d}", 1000.0 + 3 * d, 6.0 * (depth - d))
        b.launch(1000.5 + 3 * d, 1.0, "ampere_sgemm_128x64_nn", 1000.0 + 3 * d, 2.0, ext=ext)
    return b.document()


def many_streams(n: int, events_per_stream: int = 40) -> dict:
    """n/4 kernels (each with its op and launch) spread round-robin over n/events_per_stream streams,
    overlapping; after every 10 kernels a cudaDeviceSynchronize and a synchronous cudaMemcpy."""
    b = TraceBuilder()
    kernels = n // 4
    streams = max(1, n // events_per_stream)
    for k in range(kernels):
        t = 1000.0 + 10 * k
        ext = b.op("aten::mm", t, 4.0)
        b.launch(t + 1, 1.0, "ampere_sgemm_128x64_nn", t + 2, 50.0, ext=ext, stream=7 + k % streams)
        if k % 10 == 9:
            b.launch(t + 5, 2.0, None, 0.0, 0.0, api="cudaDeviceSynchronize")
            b.launch(t + 7, 2.0, "Memcpy DtoH (Device -> Pinned)", t + 8, 1.0, api="cudaMemcpyAsync",
                     kind="memcpy", bytes=4096)
            b.launch(t + 9, 0.5, "Memcpy DtoH (Device -> Pageable)", t + 9.1, 0.3, api="cudaMemcpy",
                     kind="memcpy", bytes=64)
    return b.document()


def streams_n10(n: int) -> dict:
    """many_streams over n/10 streams (2.5 kernels per stream), the audit's shape (25x for 10x)."""
    return many_streams(n, events_per_stream=10)


def synced_streams(n: int) -> dict:
    """Four ProfilerSteps of n/5 kernels over n/50 streams; a blocking cudaMemcpy after every 4th
    kernel and a cudaDeviceSynchronize after every 8th (the model matches each sync to the work
    it waits for, on every stream)."""
    b = TraceBuilder()
    kernels = n // 5
    per = max(1, kernels // 4)
    for k in range(kernels):
        t = 1000.0 + 10 * k
        if k % per == 0:
            b.annotation(f"ProfilerStep#{k // per}", t - 0.5, 10.0 * per)
        ext = b.op("aten::mm", t, 4.0)
        b.launch(t + 1, 1.0, "ampere_sgemm_128x64_nn", t + 2, 50.0, ext=ext, stream=7 + k % max(1, n // 50))
        if k % 4 == 3:
            b.launch(t + 5, 2.0, "Memcpy DtoH (Device -> Pageable)", t + 6, 0.3, api="cudaMemcpy",
                     kind="memcpy", bytes=64)
        if k % 8 == 7:
            b.launch(t + 8, 1.0, None, 0.0, 0.0, api="cudaDeviceSynchronize")
    return b.document()


def aperiodic(n: int) -> dict:
    """No ProfilerStep and no repeating period: n/3 top-level ops drawn (seeded) from 8 names, each
    launching the kernel of its name."""
    rng = random.Random(24)
    b = TraceBuilder()
    for k in range(n // 3):
        i = rng.randrange(8)
        ext = b.op(f"aten::op{i}", 1000.0 + 10 * k, 6.0)
        b.launch(1001.0 + 10 * k, 1.0, f"kernel_{i}", 1003.0 + 10 * k, 4.0, ext=ext)
    return b.document()


def many_marked_steps(n: int) -> dict:
    """n/10 ProfilerSteps, each with a DataLoader fetch, a forward mm, a backward mm on the autograd
    engine, an optimizer step with one multi-tensor kernel and an .item() sync: every per-step pass
    (the DataLoader and communication tables grouped per step in a loop of pandas groups cost ~0.5 ms a
    step) runs once per step."""
    b = TraceBuilder()
    for k in range(n // 10):
        t = 1000.0 + 200 * k
        b.annotation(f"ProfilerStep#{k}", t, 190)
        b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 1, 5.0)
        ext = b.op("aten::mm", t + 10, 8.0, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
        b.launch(t + 11, 2.0, "ampere_sgemm_128x64_nn", t + 20, 20.0, ext=ext)
        ext = b.op("autograd::engine::evaluate_function: MmBackward0", t + 50, 10.0)
        b.launch(t + 52, 2.0, "ampere_sgemm_128x64_nn", t + 60, 20.0, ext=ext)
        ext = b.op("Optimizer.step#AdamW.step", t + 100, 20.0)
        b.launch(t + 105, 2.0, "multi_tensor_apply_kernel<adam>", t + 110, 10.0, ext=ext)
        b.op("aten::item", t + 130, 30.0)
        b.launch(t + 131, 25.0, None, 0.0, 0.0, api="cudaStreamSynchronize")
    return b.document()


def checkpoint_entries(n: int) -> dict:
    """n/6 checkpoint entries on the main thread (an op with its launch, the checkpoint's tiny
    aten::empty, a cudaStreamIsCapturing, `_NoopSaveInputs`), and one backward node re-running a
    forward op on the autograd thread, so the recompute detector prices every entry."""
    b = TraceBuilder()
    blocks = n // 6
    for k in range(blocks):
        t = 1000.0 + 100 * k
        ext = b.op("aten::add", t, 20.0)
        b.launch(t + 5, 2.0, "vectorized_elementwise_kernel<4, add>", t + 10, 5.0, ext=ext)
        b.op("aten::empty", t + 30, 2.0)
        b.launch(t + 40, 1.0, None, 0.0, 0.0, api="cudaStreamIsCapturing")
        b.op("_NoopSaveInputs", t + 50, 10.0)
    t = 1000.0 + 100 * blocks
    b.op("autograd::engine::evaluate_function: AddmmBackward0", t, 50.0, tid=2)
    ext = b.op("aten::linear", t + 5, 20.0, tid=2)
    b.launch(t + 10, 2.0, "ampere_sgemm_128x64_nn", t + 15, 10.0, ext=ext, tid=2)
    return b.document()


def frozen_gqa_steps(n: int) -> dict:
    """n/20 ProfilerSteps, each with a backward that accumulates a trained gradient and 4 unread ones
    (AccumulateGrad on thread 2, two launches between them), a fused AdamW over the trained one, and a
    K/V repeat_interleave (its copy kernel) feeding an SDPA call: the frozen-gradient and GQA detectors
    run on every step."""
    b = TraceBuilder()
    for k in range(max(n // 20, 1)):
        t = 600.0 * k
        b.annotation(f"ProfilerStep#{k + 1}", t, 600.0)
        b.op("torch::autograd::AccumulateGrad", t + 10, 5, tid=2, **{"Input Dims": [[8]]})
        for i in range(2):
            b.launch(t + 20 + 20 * i, 5, "vectorized_elementwise_kernel<4, add>", t + 100 + 100 * i, 90.0, tid=2)
        for j in range(4):
            b.op("torch::autograd::AccumulateGrad", t + 300 + 10 * j, 5, tid=2, **{"Input Dims": [[4, 4]]})
        ext = b.op("aten::_fused_adamw_", t + 400, 10, **{"Input Dims": [[[8]], [[8]], [[8]], [[8]], [], [[]]]})
        b.launch(t + 402, 3, "multi_tensor_apply_kernel", t + 410, 20.0, ext=ext)
        b.op("aten::repeat_interleave", t + 450, 20, **{"Input Dims": [[2, 2, 100, 64], [], [], []],
                                                     "Concrete Inputs": ["", "4", "1", ""]})
        ext = b.op("aten::copy_", t + 455, 10, **{"Input Dims": [[2, 2, 4, 100, 64], [2, 2, 4, 100, 64]]})
        b.launch(t + 457, 3, "direct_copy_kernel_cuda", t + 460, 30.0, ext=ext)
        b.op("aten::scaled_dot_product_attention", t + 500, 20, **{
            "Input Dims": [[2, 8, 1, 64], [2, 8, 100, 64], [2, 8, 100, 64], [], [], [], [], []],
            "Concrete Inputs": ["", "", "", "", "0.", "False", "", "False"]})
    return b.document()


def _capture_pair(n: int, drop_every: int, interleave: bool) -> tuple[dict, dict]:
    """(execution trace, capture trace): one graph of ~n/4 nodes replayed 3 times; the capture has no
    warm-up (no kernel names: aligned by kinds alone); every drop_every-th node made no GPU work."""
    from graph_traces import GraphTrace, add, copy, mm

    layers = max(1, n // 28)
    ops = [mm(8, 1024, 1024), add(8192), copy(8), add(8192)] * layers if interleave else \
        [mm(8, 1024, 1024), add(8192), mm(8, 4096, 1024, split_k=True), add(8192), copy(8)] * layers
    ex = GraphTrace()
    ex.annotation("ProfilerStep#1", 0, 1e9)
    flat = len([la for op in ops for la in op.launches])
    for _ in range(3):
        ex.replay(ops, drop=tuple(range(0, flat, drop_every)))
    cap = GraphTrace()
    cap.capture(ops)
    return ex.document(), cap.document()


def value_reads(n: int) -> dict:
    """Four ProfilerSteps of n/40 reads each, the int8 scale read's shape: a stack of two scalars
    (a cat kernel), its `.tolist()` (an aten::to whose 8-byte device-to-host copy and stream sync
    wait) and a mul taking the value back as a Python float (sync_reads: one binary search per read;
    a mask over every call per read was quadratic)."""
    b = TraceBuilder()
    reads = max(n // 40, 1)
    t = 1000.0
    for _ in range(4):
        b.annotation("ProfilerStep#1", t, 30.0 * reads + 10)
        for _ in range(reads):
            ext = b.op("aten::stack", t, 6.0, **{"Input Dims": [[[], []], []]})
            b.launch(t + 1, 1.0, "CatArrayBatchedCopy", t + 2, 1.0, ext=ext)
            ext = b.op("aten::to", t + 8, 12.0, **{"Input Dims": [[2], [], [], [], []]})
            b.launch(t + 9, 6.0, "Memcpy DtoH (Device -> Pageable)", t + 10, 1.0, ext=ext, api="cudaMemcpyAsync",
                     kind="memcpy", bytes=8)
            b.launch(t + 16, 2.0, None, 0.0, 0.0, ext=ext, api="cudaStreamSynchronize")
            ext = b.op("aten::mul", t + 22, 5.0, **{"Input Dims": [[64, 64], []], "Input type": ["float", "double"]})
            b.launch(t + 23, 1.0, "vectorized_elementwise_kernel<4, mul>", t + 25, 2.0, ext=ext)
            t += 30.0
        t += 10.0
    return b.document()


def zeroed_triton_steps(n: int) -> dict:
    """Four ProfilerSteps, each a zero_grad range zeroing n/80 gradients one `aten::zero_` at a time, a
    backward thread accumulating into each (AccumulateGrad → aten::add_), and n/80 runs of two user
    Triton passes over one [512, 512] tensor (zeroed_grads: one binary search per range and a pointer
    over the accumulations; triton_passes: a walk over the user Triton kernels only)."""
    b = TraceBuilder()
    b.top["tracekit"] = {"triton_metadata": "cpu_op", "triton_kernels": [
        {"name": "row_max", "arg_names": ["x_ptr", "m_ptr"]}, {"name": "row_normalise", "arg_names": ["x_ptr", "m_ptr"]}]}
    k = max(n // 80, 1)
    t = 1000.0
    for step in range(1, 5):
        start = t
        b.annotation("Optimizer.zero_grad#AdamW.zero_grad", t, 10.0 * k)
        for _ in range(k):
            ext = b.op("aten::zero_", t + 1, 5.0, **{"Input Dims": [[64, 64]]})
            b.launch(t + 2, 1.0, "vectorized_elementwise_kernel<4, FillFunctor<float> >", t + 3, 1.0, ext=ext)
            t += 10.0
        for _ in range(k):
            b.op("torch::autograd::AccumulateGrad", t, 8.0, tid=200, **{"Input Dims": [[64, 64]]})
            ext = b.op("aten::add_", t + 1, 6.0, tid=200, **{"Input Dims": [[64, 64], [64, 64], []]})
            b.launch(t + 2, 1.0, "vectorized_elementwise_kernel<4, CUDAFunctor_add<float> >", t + 3, 2.0, ext=ext, tid=200)
            t += 10.0
        for _ in range(k):
            for user, name in enumerate(("row_max", "row_normalise"), start=1):
                ext = b.op(name, t, 6.0, kernel_backend="triton", tracekit_user_kernel=user, grid="[512, 1, 1]", num_warps=4,
                           **{"Input Dims": [[512, 512], [512]]})
                b.launch(t + 1, 2.0, name, t + 3, 3.0, ext=ext, api="cuLaunchKernel", cat="cuda_driver")
                t += 10.0
        b.annotation(f"ProfilerStep#{step}", start, t - start + 5)
        t += 10.0
    return b.document()


def separators_in_args(n: int) -> dict:
    """A small valid trace whose first kernel's args hold a string of n/3 event separators `},{`."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 900.0, 1000.0)
    for k in range(20):
        ext = b.op("aten::mm", 1000.0 + 10 * k, 6.0)
        b.launch(1001.0 + 10 * k, 1.0, "ampere_sgemm_128x64_nn", 1003.0 + 10 * k, 4.0, ext=ext)
    b.events[3]["args"]["note"] = "},{" * (n // 3)
    return b.document()


def _write(folder: Path, name: str, doc: dict) -> str:
    path = folder / name
    path.write_text(json.dumps(doc))
    return str(path)


def _analyze(shape: Callable[[int], dict]) -> Callable[[Path, int], list[str]]:
    def make(folder: Path, n: int) -> list[str]:
        return ["analyze", "--json", "-j", "1", "-q", _write(folder, f"{shape.__name__}_{n}.json", shape(n))]
    return make


def _capture(drop_every: int, interleave: bool) -> Callable[[Path, int], list[str]]:
    def make(folder: Path, n: int) -> list[str]:
        ex, cap = _capture_pair(n, drop_every, interleave)
        return ["analyze", "--json", "-j", "1", "-q", _write(folder, f"exec_{n}.json", ex),
                "--capture", _write(folder, f"capture_{n}.json", cap)]
    return make


def _export(shape: Callable[[int], dict]) -> Callable[[Path, int], list[str]]:
    def make(folder: Path, n: int) -> list[str]:
        src = _write(folder, f"{shape.__name__}_{n}.json", shape(n))
        return ["export", src, "-o", str(folder / f"out_{n}.json"), "--force", "-q"]
    return make


@dataclass(frozen=True)
class Shape:
    """One adversarial shape: `make(folder, n)` writes an input of about n events (bytes for the
    separators) and returns the tracekit command line that reads it."""

    name: str
    make: Callable[[Path, int], list[str]]
    small: int  # the size CI runs, and ten times it


SHAPES: tuple[Shape, ...] = (
    Shape("same_timestamps", _analyze(same_timestamps), 3000),
    Shape("deep_nesting", _analyze(deep_nesting), 3000),
    Shape("deep_distinct", _analyze(deep_distinct), 3000),
    Shape("many_streams", _analyze(many_streams), 2000),
    Shape("streams_n10", _analyze(streams_n10), 2000),
    Shape("aperiodic", _analyze(aperiodic), 3000),
    Shape("checkpoint_entries", _analyze(checkpoint_entries), 3000),
    Shape("many_marked_steps", _analyze(many_marked_steps), 3000),
    Shape("frozen_gqa_steps", _analyze(frozen_gqa_steps), 3000),
    Shape("synced_streams", _analyze(synced_streams), 6000),
    Shape("value_reads", _analyze(value_reads), 4000),
    Shape("zeroed_triton_steps", _analyze(zeroed_triton_steps), 4000),
    Shape("capture_alignment", _capture(50, False), 2000),
    Shape("capture_interleaved", _capture(7, True), 2000),
    Shape("export_large", _export(aperiodic), 3000),
    Shape("export_separators", _export(separators_in_args), 1_200_000),
)


# Runs in a fresh process: imports and a warm-up run first; then per shape the growth of resident
# memory of its large run (in a forked copy, see PEAK_RSS) and the CPU seconds of its small and its
# large run.
CHILD = """
import contextlib, ctypes, gc, io, json, os, resource, sys, time
from tracekit.cli import main

def run(args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(args)
    if code != 0:
        raise SystemExit(f"{args}: exit {code}: {err.getvalue()[:300]}")

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

def rss_growth(args):
    # In a forked copy: free heap pages handed back (malloc_trim), the peak-RSS mark reset to the
    # current RSS (clear_refs 5), then the run: its peak minus that baseline (bytes). A fork's peak
    # mark starts at its RSS; where clear_refs is refused, the baseline is the RSS before the trim.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            gc.collect()
            base = status("VmRSS")  # the mark a fork starts from, if it cannot be reset
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
                base = status("VmRSS")
            run(args)
            msg = {"growth": status("VmHWM") - base, "base": base}
        except BaseException as exc:
            msg = {"error": repr(exc)[:300]}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = json.loads(fh.read() or b'{"error": "no answer"}')
    os.waitpid(pid, 0)
    if "error" in got:
        raise SystemExit(f"{args}: {got['error']}")
    return got["growth"]

out = {}
for name, warm, small, large, memory in json.loads(sys.argv[1]):
    run(warm)
    got = out[name] = {}
    if memory:
        got["peak_small"], got["peak"] = rss_growth(small), rss_growth(large)
    for label, args in (("small", small), ("large", large)):
        gc.collect()
        start = time.process_time()
        run(args)
        got[label] = time.process_time() - start
print(json.dumps(out))
"""


def measure(shapes: tuple[Shape, ...], folder: Path, *, scale: int = 1, factor: int = 10,
            memory: frozenset[str] = frozenset()) -> dict[str, dict[str, float]]:
    """Per shape: CPU seconds at its small size times `scale` ("small") and at `factor` times that
    ("large"), the raw bytes of the large input ("raw_bytes") and, for the shapes named in
    `memory`, the growth of resident memory during the large run over the process's resident set
    before it ("peak", bytes; Linux /proc; "peak_small" that of the small run), "raw_small" the raw
    bytes of the small input; all shapes measured in one fresh process."""
    import subprocess
    import sys

    plan = []
    for shape in shapes:
        base = shape.small * scale
        row: list[object] = [shape.name]
        for label, n in (("warm", max(base // 10, 30)), ("small", base), ("large", base * factor)):
            sub = folder / shape.name / label
            sub.mkdir(parents=True)
            row.append(shape.make(sub, n))
        plan.append([*row, shape.name in memory])
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan)], capture_output=True, text=True,
                         timeout=1800)
    if res.returncode != 0:
        raise AssertionError(res.stderr.strip()[-800:])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for shape in shapes:
        for label, key in (("large", "raw_bytes"), ("small", "raw_small")):
            out[shape.name][key] = sum(p.stat().st_size for p in (folder / shape.name / label).iterdir()
                                       if p.name.endswith(".json") and not p.name.startswith("out_"))
    return out
