"""An eager elementwise chain, gelu(x * w + b) + residual, on 64M fp32 elements: four bandwidth-bound kernels.

Run: tracekit profile sample_traces/scripts/elementwise_eager.py -o sample_traces/elementwise_eager.trace.json.gz
x and residual are 8192x8192 (256 MiB each); w and b are per-column vectors broadcast over the rows.
Eager moves ~2.3 GiB per step (every intermediate written then read back); one fused kernel needs
~0.75 GiB (read x and residual, write out). elementwise_compiled.py is the torch.compile "after".
"""

import torch
import torch.nn.functional as F

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * w + b) + residual


def build(device: str) -> tuple[torch.Tensor, ...]:
    n = 8192 if device == "cuda" else 256
    x = torch.randn(n, n, device=device)
    w = torch.randn(n, device=device)
    b = torch.randn(n, device=device)
    residual = torch.randn(n, n, device=device)
    return x, w, b, residual


def main(fn=chain) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = build(device)
    for _ in range(3):  # warm-up (and, for the compiled chain, compilation)
        fn(*args)
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(10):
        fn(*args)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
