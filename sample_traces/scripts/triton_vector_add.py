"""The seed's Triton vector add (`add_kernel`) on two 64M-element fp32 vectors: a pure bandwidth kernel.

Run: tracekit profile sample_traces/scripts/triton_vector_add.py -o sample_traces/triton_vector_add.trace.json.gz
On a machine without CUDA it runs a tiny size under Triton's interpreter (TRITON_INTERPRET=1).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import triton
import triton.language as tl

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Launch add_kernel over the whole vector, 1024 elements per program."""
    n = out.numel()
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    return out


def build(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # 64M fp32 = 256 MiB per vector: 768 MiB moved per call, far beyond the 50 MB L2
    n = 1 << 26 if device == "cuda" else 5000
    x = torch.rand(n, device=device)
    y = torch.rand(n, device=device)
    return x, y, torch.empty_like(x)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y, out = build(device)
    add(x, y, out)  # warm-up: compiles the kernel
    assert torch.equal(out, x + y), "add_kernel disagrees with torch"
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(10):
        add(x, y, out)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
