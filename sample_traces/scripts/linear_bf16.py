"""One bf16 nn.Linear(4096, 4096) on a batch of 4096 rows, inference: a compute-bound cuBLAS GEMM.

Run: tracekit profile sample_traces/scripts/linear_bf16.py -o sample_traces/linear_bf16.trace.json.gz
Each step is 2*4096^3 = 137.4 GFLOP (plus the bias add, fused into the GEMM by cuBLAS as addmm).
"""

import torch
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def build(device: str, dtype: torch.dtype = torch.bfloat16) -> tuple[nn.Module, torch.Tensor]:
    n = 4096 if device == "cuda" else 256
    layer = nn.Linear(n, n, device=device, dtype=dtype)
    x = torch.randn(n, n, device=device, dtype=dtype)
    return layer, x


@torch.no_grad()
def step(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return layer(x)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layer, x = build(device)
    for _ in range(3):  # warm-up: cuBLAS handle and heuristics
        step(layer, x)
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(10):
        step(layer, x)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
