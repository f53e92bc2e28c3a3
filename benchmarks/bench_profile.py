"""Overhead of tracekit's profiler over a bare torch.profiler block, on the GPT-2 decode sample (issue 3).

  python3 benchmarks/bench_profile.py [--rounds N] [--out DIR]

One process; the model is built and warmed up once. Each round runs the same 20-token greedy decode
(sample_traces/scripts/gpt2_decode.py: prefill + 20 tokens, one step mark per token) once under each
of three profilers, in an order that rotates from round to round:
  tracekit      `with tracekit.profile(path, force=True, report=False):`, tracekit.step() marks the
                steps (Triton launch recording and the optimizer hook installed, metadata, gzip)
  torch         `with torch.profiler.profile(activities=CPU+CUDA, record_shapes=True,
                schedule=<RECORD every step>) as p:`, p.step() marks the steps (so the trace has the
                same ProfilerStep#N annotations), then p.export_chrome_trace(path.json.gz)
  torch_nosched the same without a schedule (torch then records no ProfilerStep annotations)
For each: the wall time of the decode inside the block ("run") and of the whole block from entering
it to the trace file on disk ("total"); medians over rounds, and the median of the per-round ratios
tracekit/torch. gc.collect() runs before every block. Target (issue 3): <= 5 % over torch.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_traces" / "scripts"))
import gpt2_decode


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _decode(d: gpt2_decode.Decoder, mark) -> float:
    t0 = time.perf_counter()
    gpt2_decode.generate(d, mark=mark)
    _sync()
    return time.perf_counter() - t0


def run_tracekit(d: gpt2_decode.Decoder, path: Path) -> tuple[float, float]:
    from tracekit.profile.api import profile
    from tracekit.profile.steps import step

    t0 = time.perf_counter()
    with profile(path, force=True, report=False):
        run = _decode(d, step)
    return run, time.perf_counter() - t0


def run_torch(d: gpt2_decode.Decoder, path: Path, *, scheduled: bool = True) -> tuple[float, float]:
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    schedule = (lambda step: ProfilerAction.RECORD) if scheduled else None
    t0 = time.perf_counter()
    with profile(activities=activities, record_shapes=True, schedule=schedule) as prof:
        run = _decode(d, prof.step)
    prof.export_chrome_trace(str(path))
    return run, time.perf_counter() - t0


def run_torch_nosched(d: gpt2_decode.Decoder, path: Path) -> tuple[float, float]:
    return run_torch(d, path, scheduled=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="folder for the last traces and a JSON")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_profile-"))
    out.mkdir(parents=True, exist_ok=True)
    d = gpt2_decode.build(device)
    for _ in range(3):  # warm-up, unprofiled
        _decode(d, lambda: None)
    bare = [_decode(d, lambda: None) for _ in range(5)]
    funcs = {"tracekit": run_tracekit, "torch": run_torch, "torch_nosched": run_torch_nosched}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in funcs}
    names = list(funcs)
    for name in names:  # one unrecorded block of each first: CUPTI's first-use cost stays out
        gc.collect()
        funcs[name](d, out / f"warm_{name}.trace.json.gz")
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order
            gc.collect()
            runs[name].append(funcs[name](d, out / f"{name}.trace.json.gz"))
    med = {
        name: {
            "run_s": statistics.median(x[0] for x in v),
            "total_s": statistics.median(x[1] for x in v),
            "run_s_min": min(x[0] for x in v),
            "total_s_min": min(x[1] for x in v),
        }
        for name, v in runs.items()
    }
    tk, th = runs["tracekit"], runs["torch"]
    over_total = 100 * (statistics.median(a[1] / b[1] for a, b in zip(tk, th, strict=True)) - 1)
    over_run = 100 * (statistics.median(a[0] / b[0] for a, b in zip(tk, th, strict=True)) - 1)
    sizes = {p.name: p.stat().st_size for p in out.glob("*.trace.json.gz")}
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "rounds": args.rounds,
        "unprofiled_decode_s_median": statistics.median(bare),
        "median": med,
        "overhead_total_pct": over_total,
        "overhead_run_pct": over_run,
        "all": runs,
        "trace_bytes": sizes,
    }
    (out / "bench_profile.json").write_text(json.dumps(result, indent=1))
    print(f"device {result['device']}, torch {torch.__version__}, {args.rounds} rounds, rotating order")
    print(f"unprofiled decode (prefill + 20 tokens): {1e3 * result['unprofiled_decode_s_median']:.1f} ms")
    print(f"{'median (min)':14s} {'run (ms)':>18s} {'total (ms)':>18s}")
    for name in ("torch_nosched", "torch", "tracekit"):
        m = med[name]
        run = f"{1e3 * m['run_s']:.1f} ({1e3 * m['run_s_min']:.1f})"
        total = f"{1e3 * m['total_s']:.1f} ({1e3 * m['total_s_min']:.1f})"
        print(f"{name:14s} {run:>18s} {total:>18s}")
    print(
        f"tracekit over torch (median of per-round ratios): {over_total:+.1f} % total, "
        f"{over_run:+.1f} % run (target <= 5 %)"
    )
    print(f"trace sizes: {sizes}")


if __name__ == "__main__":
    main()
