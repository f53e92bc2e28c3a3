"""The same nn.Linear(4096, 4096) on 4096 rows in fp32 with TF32 OFF: the GEMM runs on the slow fp32 roof.

Run: tracekit profile sample_traces/scripts/linear_fp32.py -o sample_traces/linear_fp32.trace.json.gz
This is the "before" of the lower-precision rule; linear_tf32.py is the "after".
"""

import torch
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def build(device: str) -> tuple[nn.Module, torch.Tensor]:
    n = 4096 if device == "cuda" else 256
    layer = nn.Linear(n, n, device=device)
    x = torch.randn(n, n, device=device)
    return layer, x


@torch.no_grad()
def step(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return layer(x)


def main(tf32: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32  # False is PyTorch's default for matmuls
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
    main(tf32=False)
