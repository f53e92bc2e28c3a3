"""The work of small_matmul_loop.py (256 x 64x64 @ 64x64, fp32) as one torch.bmm launch.

Run: tracekit profile sample_traces/scripts/small_matmul_bmm.py -o sample_traces/small_matmul_bmm.trace.json.gz
The "after" of the batch-into-bmm rule.
"""

import torch
from small_matmul_loop import build

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def step(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b, out=c)


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
