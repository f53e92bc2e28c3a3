"""Overhead of tracekit's profiler over a bare torch.profiler block, on the GPT-2 decode sample (issue 3).

  python3 benchmarks/bench_profile.py [--rounds N] [--out DIR]

One process; the model is built and warmed up once. Each round runs the same 20-token greedy decode
(sample_traces/scripts/gpt2_decode.py: prefill + 20 tokens, one step mark per token) twice, in
alternating order:
  tracekit : `with tracekit.profile(path, force=True, report=False):` (tracekit.step() marks steps,
             Triton launch recording and the optimizer hook installed, metadata added, gzip output)
  torch    : `with torch.profiler.profile(activities=CPU+CUDA, record_shapes=True) as p:`
             (p.step() marks steps), then p.export_chrome_trace(path.json.gz)
and reports for each the median wall time of the decode inside the block ("run") and of the whole
block from entering it to the trace file on disk ("total"), plus an unprofiled decode for scale.
Target (issue 3): tracekit's total within 5 % of torch's.
"""

from __future__ import annotations

import argparse
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


def run_torch(d: gpt2_decode.Decoder, path: Path) -> tuple[float, float]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    t0 = time.perf_counter()
    with profile(activities=activities, record_shapes=True) as prof:
        run = _decode(d, prof.step)
    prof.export_chrome_trace(str(path))
    return run, time.perf_counter() - t0


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
    runs = {"tracekit": [], "torch": []}
    funcs = {"tracekit": run_tracekit, "torch": run_torch}
    # one unrecorded round of each first: the profiler's own first-use cost (CUPTI init) stays out
    run_tracekit(d, out / "warm_tracekit.trace.json.gz")
    run_torch(d, out / "warm_torch.trace.json.gz")
    for r in range(args.rounds):
        order = ("tracekit", "torch") if r % 2 == 0 else ("torch", "tracekit")
        for name in order:
            runs[name].append(funcs[name](d, out / f"{name}.trace.json.gz"))
    med = {
        name: {
            "run_s": statistics.median(x[0] for x in v),
            "total_s": statistics.median(x[1] for x in v),
        }
        for name, v in runs.items()
    }
    over_total = 100 * (med["tracekit"]["total_s"] / med["torch"]["total_s"] - 1)
    over_run = 100 * (med["tracekit"]["run_s"] / med["torch"]["run_s"] - 1)
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
    print(f"device {result['device']}, torch {torch.__version__}, {args.rounds} rounds, alternating")
    print(f"unprofiled decode (prefill + 20 tokens): {1e3 * result['unprofiled_decode_s_median']:.1f} ms")
    print(f"{'':10s} {'run (ms)':>10s} {'total (ms)':>11s}")
    for name in ("torch", "tracekit"):
        print(f"{name:10s} {1e3 * med[name]['run_s']:10.1f} {1e3 * med[name]['total_s']:11.1f}")
    print(f"tracekit overhead: {over_total:+.1f} % total, {over_run:+.1f} % run (target <= 5 %)")
    print(f"trace sizes: {sizes}")


if __name__ == "__main__":
    main()
