"""GPU check of the memory view: per-step peak from `[memory]` events vs torch.cuda.max_memory_allocated.

Run on a CUDA machine from the repository root (torch with CUDA; tracekit optional):

    OUT=/tmp/mem python3 benchmarks/gpu/memory_validate.py [--seq 1024] [--steps 4]

It trains a small GPT-like model (naive attention, so activation memory grows fast with the batch)
and, for a few batch sizes, records a trace with `torch.profiler(profile_memory=True)` and, in the
same process, `torch.cuda.max_memory_allocated()` / `max_memory_reserved()` of each step (peak
statistics reset at the start of each step, right after `prof.step()`). Then it finds the largest
batch that trains without running out of memory (doubling, then bisection). When tracekit imports,
one more run goes through `python3 -m tracekit profile --memory` in a child process. Writes into
$OUT: mem_b{B}.trace.json.gz, tk_b{B}.trace.json.gz (if tracekit ran), memory_validate.json (every
number), memory_validate.log.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn


class Block(nn.Module):
    """One pre-norm transformer block with explicit (materialised) attention scores."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def make_model(dim: int, heads: int, layers: int) -> nn.Module:
    return nn.Sequential(*[Block(dim, heads) for _ in range(layers)], nn.Linear(dim, 1)).cuda()


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: int, seq: int, dim: int) -> None:
    x = torch.randn(batch, seq, dim, device="cuda")
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def fits(batch: int, args: argparse.Namespace) -> bool:
    """Whether two training steps at `batch` run without torch.cuda.OutOfMemoryError."""
    model = make_model(args.dim, args.heads, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    try:
        for _ in range(2):
            train_step(model, opt, batch, args.seq, args.dim)
        torch.cuda.synchronize()
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        del model, opt
        torch.cuda.empty_cache()


def export_gzip(prof, path: Path) -> None:
    """Write the profiler's chrome trace to `path` + ".gz" (and not `path`)."""
    prof.export_chrome_trace(str(path))
    with open(path, "rb") as src, gzip.open(str(path) + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()


def profiled(batch: int, args: argparse.Namespace, out: Path) -> dict:
    """Train `args.steps` steps at `batch` under torch.profiler(profile_memory=True); per-step peaks."""
    from torch.profiler import ProfilerActivity, profile

    model = make_model(args.dim, args.heads, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train_step(model, opt, batch, args.seq, args.dim)  # optimizer state exists before recording
    torch.cuda.synchronize()
    allocated, reserved, times = [], [], []
    path = out / f"mem_b{batch}.trace.json"
    # no schedule: every step is recorded (a schedule without on_trace_ready leaves export_chrome_trace
    # nothing once its cycle ends); prof.step() still marks each ProfilerStep#N
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                 record_shapes=True) as prof:
        for _ in range(args.steps):
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            train_step(model, opt, batch, args.seq, args.dim)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            allocated.append(torch.cuda.max_memory_allocated())
            reserved.append(torch.cuda.max_memory_reserved())
            prof.step()
    export_gzip(prof, path)
    del model, opt
    torch.cuda.empty_cache()
    return {"batch": batch, "trace": path.name + ".gz", "max_memory_allocated": allocated,
            "max_memory_reserved": reserved, "step_ms": times}


def largest_batch(args: argparse.Namespace, log) -> dict:
    """Largest batch that fits: double from args.start until OOM, then bisect to within 5 %."""
    good, bad, b = 0, None, args.start
    tried = []
    while bad is None and b <= args.max_batch:
        ok = fits(b, args)
        tried.append((b, ok))
        log(f"batch {b}: {'fits' if ok else 'OOM'}")
        if ok:
            good, b = b, b * 2
        else:
            bad = b
    while bad is not None and bad - good > max(1, good // 20):
        mid = (good + bad) // 2
        ok = fits(mid, args)
        tried.append((mid, ok))
        log(f"batch {mid}: {'fits' if ok else 'OOM'}")
        good, bad = (mid, bad) if ok else (good, mid)
    return {"largest_fitting": good, "smallest_oom": bad, "tried": tried}


def tracekit_run(batch: int, args: argparse.Namespace, out: Path, log) -> dict | None:
    """The same training through `python3 -m tracekit profile --memory` (child process), if tracekit imports."""
    check = subprocess.run([sys.executable, "-c", "import tracekit.cli"], capture_output=True, text=True)
    if check.returncode != 0:
        log(f"tracekit not importable ({check.stderr.strip()[-300:]}); skipping the tracekit profile run")
        return None
    trace = out / f"tk_b{batch}.trace.json.gz"
    record = out / f"tk_b{batch}.steps.json"
    cmd = [sys.executable, "-m", "tracekit", "profile", "--memory", "--no-bare", "--no-report", "--force",
           "--warmup", "1", "--active", str(args.steps), "-o", str(trace), __file__, "--child", str(batch),
           "--record", str(record), "--seq", str(args.seq), "--dim", str(args.dim), "--heads", str(args.heads),
           "--layers", str(args.layers), "--steps", str(args.steps + 2)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        log("tracekit profile run timed out")
        return None
    log(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if proc.returncode != 0 or not record.exists():
        return None
    return {"batch": batch, "trace": trace.name, **json.loads(record.read_text())}


def child(args: argparse.Namespace) -> None:
    """The script `tracekit profile` runs: train, write each step's max_memory_allocated to --record."""
    model = make_model(args.dim, args.heads, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    allocated = []
    for _ in range(args.steps):
        torch.cuda.reset_peak_memory_stats()
        train_step(model, opt, args.child, args.seq, args.dim)
        torch.cuda.synchronize()
        allocated.append(torch.cuda.max_memory_allocated())
    Path(args.record).write_text(json.dumps({"max_memory_allocated": allocated}))


def logger(path: Path):
    """A function that prints a line and appends it to `path`."""
    def log(msg: str) -> None:
        print(msg, flush=True)
        with open(path, "a") as logf:
            logf.write(msg + "\n")
    return log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 16, 64, 256])
    ap.add_argument("--start", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=1 << 14)
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--record", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    out = Path(os.environ.get("OUT", "/tmp/memory_validate"))
    out.mkdir(parents=True, exist_ok=True)
    log = logger(out / "memory_validate.log")

    props = torch.cuda.get_device_properties(0)
    result: dict = {"device": props.name, "total_memory": props.total_memory, "torch": torch.__version__,
                    "model": {k: getattr(args, k) for k in ("seq", "dim", "heads", "layers", "steps")},
                    "profiled": [], "tracekit": []}
    log(json.dumps({k: result[k] for k in ("device", "total_memory", "torch", "model")}))
    for b in args.batches:
        r = profiled(b, args, out)
        log(json.dumps(r))
        result["profiled"].append(r)
    t0 = time.time()
    result["oom_search"] = largest_batch(args, log)
    result["oom_search"]["seconds"] = round(time.time() - t0, 1)
    tk = tracekit_run(args.batches[-1], args, out, log)
    if tk is not None:
        result["tracekit"].append(tk)
    (out / "memory_validate.json").write_text(json.dumps(result, indent=1))
    log("done")


if __name__ == "__main__":
    main()
