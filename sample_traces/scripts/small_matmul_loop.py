"""A Python loop of 256 small matmuls (64x64 @ 64x64, fp32): each kernel runs ~2-4 µs, less than its launch.

Run: tracekit profile sample_traces/scripts/small_matmul_loop.py -o sample_traces/small_matmul_loop.trace.json.gz
The "before" of the CUDA-graph and batch-into-bmm rules: small_matmul_graph.py replays this exact loop
from a CUDA graph, small_matmul_bmm.py does the same work as one torch.bmm.
"""

import torch

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""

BATCH, N = 256, 64


def build(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.randn(BATCH, N, N, device=device)
    b = torch.randn(BATCH, N, N, device=device)
    return a, b, torch.empty(BATCH, N, N, device=device)


def step(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    for i in range(BATCH):  # one cuBLAS launch per iteration
        torch.mm(a[i], b[i], out=c[i])
    return c


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b, c = build(device)
    for _ in range(3):  # warm-up
        step(a, b, c)
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(5):
        step(a, b, c)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
