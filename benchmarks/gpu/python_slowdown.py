"""How much slower plain Python (no torch ops) runs while torch.profiler records, with tracekit profile's settings and parts of them.

    python3 benchmarks/gpu/python_slowdown.py [--repeats N]

Four loops, each timed by perf_counter_ns: `hash` (a character-hash tokenizer over short strings: no
torch at all), `calls` (a Python function call per item), `tensor` (torch.tensor of a 4000 x 32 list
of ints: one op, the list walked in C++), `add` (torch.add on a 1-element tensor, one op
per item). Each runs bare, under torch.profiler with CPU+CUDA activities and record_shapes (tracekit
profile's settings), with CPU only, with CUDA only, alternating, N repeats; the minimum of each is
printed with its ratio to bare (JSON on the last line).
"""

import argparse
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

WORDS = ["alpha", "betabeta", "gamma", "deltadelta", "omega", "kappakappa"]
TEXTS = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(4 + i % 9)) for i in range(4000)]


def hash_loop() -> int:
    total = 0
    for s in TEXTS:
        for word in s.split():
            h = 7
            for c in word:
                h = (h * 31 + ord(c)) % 50000
            total += h
    return total


IDS = [[(i * 31 + j) % 50000 for j in range(32)] for i in range(4000)]


def tensor_loop() -> None:
    torch.tensor(IDS, dtype=torch.long)


def _f(x: int) -> int:
    return x + 1


def calls_loop() -> int:
    t = 0
    for _ in range(200_000):
        t = _f(t)
    return t


X = torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu")


def add_loop() -> None:
    y = X
    for _ in range(2000):
        y = torch.add(y, X)
    if X.is_cuda:
        torch.cuda.synchronize()


def timed(fn) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    modes = {"bare": None, "cpu+cuda+shapes": ([ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []), True),
             "cpu": ([ProfilerActivity.CPU], False)}
    if cuda:
        modes["cuda"] = ([ProfilerActivity.CUDA], False)
    loops = {"hash": hash_loop, "calls": calls_loop, "tensor": tensor_loop, "add": add_loop}
    best: dict[str, dict[str, float]] = {m: {k: float("inf") for k in loops} for m in modes}
    for fn in loops.values():
        fn()
    for _ in range(args.repeats):
        for mode, setting in modes.items():
            for name, fn in loops.items():
                if setting is None:
                    us = timed(fn)
                else:
                    with profile(activities=setting[0], record_shapes=setting[1]):
                        us = timed(fn)
                best[mode][name] = min(best[mode][name], us)
    for mode in modes:
        print(mode, " ".join(f"{k}={v:.0f}us (x{v / best['bare'][k]:.2f})" for k, v in best[mode].items()))
    print(json.dumps({"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__, "best_us": best}))


if __name__ == "__main__":
    main()
