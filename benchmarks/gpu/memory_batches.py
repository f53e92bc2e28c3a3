"""GPU check of the memory view at several batch sizes: per-step peaks, the batch estimate, throughput.

Run on a CUDA machine from the repository root (torch with CUDA; tracekit not needed):

    OUT=/tmp/mem python3 benchmarks/gpu/memory_batches.py [--batches 2 32 256] [--steps 3] [--budget 120]

The model is the one of benchmarks/gpu/memory_validate.py (4 pre-norm blocks, width 512, 8 heads,
sequence 512, attention scores materialised, AdamW, fp32). For each batch of --batches it records a
trace with `torch.profiler(profile_memory=True, record_shapes=True)`, every step marked by
`prof.step()`, and in the same process `torch.cuda.max_memory_allocated()` / `max_memory_reserved()`
of each step (peak statistics reset right after `prof.step()`). Then, without the profiler:

- the plain step time and the peak allocated at every power of two from 1 up to the largest that fits
  (samples per second at each: what a larger batch buys per sample);
- the largest batch that trains two steps without torch.cuda.OutOfMemoryError: doubling from --start,
  then bisection to within 2 %, each try with a fresh model and optimizer, the whole search stopped
  after --budget seconds (then the bracket found so far is written, marked `stopped_by_budget`).

`--device cpu` runs the same flow on the CPU with a tiny model for checking the script itself: no
memory statistics, and "out of memory" simulated above --cpu-limit samples.

One more recording at --stack-batch adds Python stacks and nn.Module frames (with_stack, with_modules:
what the operator view groups by module and source line).

Writes into $OUT: batch_b{B}.trace.json.gz (one per profiled batch), stack_b{B}.trace.json.gz,
memory_batches.json (every number) and memory_batches.log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_validate import Block, export_gzip, logger  # the same model as the single-batch check


class Simulated(Exception):
    """The CPU stand-in for torch.cuda.OutOfMemoryError (--device cpu)."""


def oom_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [Simulated]
    if hasattr(torch.cuda, "OutOfMemoryError"):
        errors.append(torch.cuda.OutOfMemoryError)
    return tuple(errors)


class Run:
    """The model, its device and the memory statistics of that device."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cuda = args.device == "cuda"
        self.device = torch.device(args.device)

    def model(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        a = self.args
        model = nn.Sequential(*[Block(a.dim, a.heads) for _ in range(a.layers)], nn.Linear(a.dim, 1)).to(self.device)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(self, model: nn.Module, opt: torch.optim.Optimizer, batch: int) -> None:
        if not self.cuda and batch > self.args.cpu_limit:
            raise Simulated(f"batch {batch} > --cpu-limit {self.args.cpu_limit}")
        x = torch.randn(batch, self.args.seq, self.args.dim, device=self.device)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peaks(self) -> tuple[int | None, int | None]:
        if not self.cuda:
            return None, None
        return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()

    def release(self) -> None:
        if self.cuda:
            torch.cuda.empty_cache()


def profiled(run: Run, batch: int, out: Path, stack: bool = False) -> dict:
    """`steps` steps at `batch` under torch.profiler(profile_memory=True): the trace, per-step peaks.
    `stack`: with Python stacks and nn.Module frames too (with_stack, with_modules: the operator view)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    model, opt = run.model()
    run.step(model, opt, batch)  # optimizer state exists before recording
    run.sync()
    allocated, reserved, times = [], [], []
    path = out / f"{'stack' if stack else 'batch'}_b{batch}.trace.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.cuda else [])
    # no schedule: every step is recorded; without one torch.profiler writes no ProfilerStep#N marks
    # (record_steps is off), so each step is marked here, as prof.step() would with a schedule
    with profile(activities=activities, profile_memory=True, record_shapes=True,
                 with_stack=stack, with_modules=stack) as prof:
        for i in range(run.args.steps):
            run.reset_peak()
            t0 = time.perf_counter()
            with record_function(f"ProfilerStep#{i}"):
                run.step(model, opt, batch)
                run.sync()
            times.append((time.perf_counter() - t0) * 1e3)
            a, r = run.peaks()
            allocated.append(a)
            reserved.append(r)
    export_gzip(prof, path)
    del model, opt
    run.release()
    return {"batch": batch, "trace": path.name + ".gz", "max_memory_allocated": allocated,
            "max_memory_reserved": reserved, "profiled_step_ms": times}


def plain(run: Run, batch: int, steps: int = 6) -> dict | None:
    """Plain (unprofiled) step time and peak allocated at `batch`; None when it runs out of memory."""
    model, opt = run.model()
    try:
        for _ in range(2):
            run.step(model, opt, batch)
        run.sync()
        run.reset_peak()
        t0 = time.perf_counter()
        for _ in range(steps):
            run.step(model, opt, batch)
        run.sync()
        ms = (time.perf_counter() - t0) * 1e3 / steps
        a, r = run.peaks()
        return {"batch": batch, "step_ms": ms, "samples_per_s": batch * 1e3 / ms, "max_memory_allocated": a,
                "max_memory_reserved": r}
    except oom_errors():
        return None
    finally:
        del model, opt
        run.release()


def fits(run: Run, batch: int) -> bool:
    """Whether two training steps at `batch` run without running out of memory (fresh model and optimizer)."""
    model, opt = run.model()
    try:
        for _ in range(2):
            run.step(model, opt, batch)
        run.sync()
        return True
    except oom_errors():
        return False
    finally:
        del model, opt
        run.release()


def search(try_batch: Callable[[int], bool], start: int, max_batch: int, budget_s: float,
           clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] = print) -> dict:
    """Largest batch for which `try_batch` holds: double from `start` until it fails, then bisect until
    the bracket is within 2 % (or 1); stops when `budget_s` seconds have passed."""
    t0 = clock()
    good, bad, b = 0, None, start
    tried: list[tuple[int, bool]] = []

    def attempt(n: int) -> bool | None:
        """Try batch n and log it; None once the budget is spent."""
        if clock() - t0 > budget_s:
            return None
        ok = try_batch(n)
        tried.append((n, ok))
        log(f"batch {n}: {'fits' if ok else 'OOM'}")
        return ok

    stopped = False
    while bad is None and b <= max_batch and not stopped:  # doubling
        ok = attempt(b)
        stopped = ok is None
        if ok:
            good, b = b, b * 2
        elif ok is False:
            bad = b
    while not stopped and bad is not None and bad - good > max(1, good // 50):  # bisection
        mid = (good + bad) // 2
        ok = attempt(mid)
        stopped = ok is None
        if ok:
            good = mid
        elif ok is False:
            bad = mid
    return {"largest_fitting": good, "smallest_oom": bad, "tried": tried, "stopped_by_budget": stopped,
            "seconds": round(clock() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per batch")
    ap.add_argument("--batches", type=int, nargs="+", default=[2, 32, 256])
    ap.add_argument("--stack-batch", type=int, default=32, help="one more recording with Python stacks (0: none)")
    ap.add_argument("--start", type=int, default=128)
    ap.add_argument("--max-batch", type=int, default=1 << 14)
    ap.add_argument("--budget", type=float, default=120.0, help="seconds for the out-of-memory search")
    ap.add_argument("--cpu-limit", type=int, default=40, help="--device cpu: batches above it 'run out of memory'")
    args = ap.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    out = Path(os.environ.get("OUT", "/tmp/memory_batches"))
    out.mkdir(parents=True, exist_ok=True)

    log = logger(out / "memory_batches.log")

    run = Run(args)
    result: dict = {"device": args.device, "torch": torch.__version__,
                    "model": {k: getattr(args, k) for k in ("seq", "dim", "heads", "layers", "steps")}}
    if run.cuda:
        props = torch.cuda.get_device_properties(0)
        result.update(device=props.name, total_memory=props.total_memory)
    log(json.dumps(result))
    result["profiled"] = []
    for b in args.batches:
        r = profiled(run, b, out)
        log(json.dumps(r))
        result["profiled"].append(r)
    if args.stack_batch:
        r = profiled(run, args.stack_batch, out, stack=True)
        log(json.dumps(r))
        result["stacked"] = r
    result["plain"] = []
    b = 1
    while b <= args.max_batch:
        r = plain(run, b)
        if r is None:
            log(f"plain batch {b}: OOM")
            break
        log(json.dumps(r))
        result["plain"].append(r)
        b *= 2
    result["oom_search"] = search(lambda n: fits(run, n), args.start, args.max_batch, args.budget, log=log)
    (out / "memory_batches.json").write_text(json.dumps(result, indent=1))
    log("done")


if __name__ == "__main__":
    main()
