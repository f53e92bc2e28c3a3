"""Host cost of one call of a small function on the GPU, bare (no profiler): eager, torch.compile default mode, mode="reduce-overhead" (CUDA-graph trees) and a manual CUDA graph replay, for functions of K kernels.

Run on the GPU machine: python3 benchmarks/gpu/graph_tree_cost.py [--calls 2000] > graph_tree_cost.txt
Each function is a chain of K/2 (matmul, tanh) pairs on a 1,024 x 256 fp32 tensor (microseconds of GPU
work each, so every mode is host-bound). Inputs: all static (the same tensors each call) or one fresh
input per call (a new tensor each call, as a sampled noise draw is: reduce-overhead copies it into its
static buffer). Prints µs per call (wall clock over `--calls` calls after 50 warm-up calls, one
synchronize at each end) and the least-squares fixed and per-kernel parts per mode.
"""

import argparse
import time

import torch


def chain(k: int):
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(k // 2):
            x = torch.tanh(x @ w)
        return x
    return fn


def per_call_us(call, calls: int, fresh: bool, x: torch.Tensor, w: torch.Tensor) -> float:
    xs = [torch.randn_like(x) for _ in range(8)] if fresh else [x]
    for i in range(50):
        call(xs[i % len(xs)], w)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        call(xs[i % len(xs)], w)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def manual_graph(fn, x: torch.Tensor, w: torch.Tensor):
    sx = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(sx, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(sx, w)

    def call(xi: torch.Tensor, wi: torch.Tensor) -> torch.Tensor:
        if xi is not sx:
            sx.copy_(xi)
        g.replay()
        return out
    return call


def fit(ks: list[int], ys: list[float]) -> tuple[float, float]:
    n = len(ks)
    mk, my = sum(ks) / n, sum(ys) / n
    b = sum((k - mk) * (y - my) for k, y in zip(ks, ys, strict=True)) / sum((k - mk) ** 2 for k in ks)
    return my - b * mk, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    x = torch.randn(1024, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda") / 16
    ks = [4, 16, 64]
    for fresh in (False, True):
        rows: dict[str, list[float]] = {}
        for k in ks:
            fn = chain(k)
            torch._dynamo.reset()
            modes = {"eager": fn,
                     "default": torch.compile(fn, dynamic=False),
                     "reduce-overhead": torch.compile(fn, mode="reduce-overhead", dynamic=False),
                     "manual graph": manual_graph(fn, x, w)}
            for name, call in modes.items():
                us = per_call_us(call, args.calls, fresh, x, w)
                rows.setdefault(name, []).append(us)
                print(f"fresh_input={fresh} K={k:3d} {name:16s} {us:8.2f} us/call", flush=True)
        for name, ys in rows.items():
            a, b = fit(ks, ys)
            print(f"fit fresh_input={fresh} {name:16s} fixed {a:7.2f} us + {b:6.3f} us per kernel")


if __name__ == "__main__":
    main()
