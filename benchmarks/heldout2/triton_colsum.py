"""A user Triton kernel: column sums of a tall fp32 matrix (x.sum(0)), one program per 32 columns
walking all rows in 32-row tiles; the grid is only N/32 programs, so most SMs idle.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/triton_colsum.py
Variants: --variant split (the same kernel with 128-column tiles and the rows split over 64 programs
per column tile, partial sums combined by atomic_add), --variant torch (`x.sum(0)`). On the GPU:
x is 131,072 x 1024 fp32 (512 MiB), 8 calls per step. Needs CUDA and Triton (on the CPU only the
torch variant runs). Each step ends with tracekit.step().
"""

import sys

import torch
from _common import CUDA, DEVICE, StepTimer, options

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def colsum_kernel(x_ptr, out_ptr, M, N, rows_per_prog, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Column sums of rows [pid_m * rows_per_prog, +rows_per_prog) for BLOCK_N columns."""
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        start = pid_m * rows_per_prog
        for r in range(start, start + rows_per_prog, BLOCK_M):
            rows = r + tl.arange(0, BLOCK_M)
            mask = (rows[:, None] < M) & (cols[None, :] < N)
            tile = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
            acc += tl.sum(tile, axis=0)
        tl.atomic_add(out_ptr + cols, acc, mask=cols < N)


def colsum(x: torch.Tensor, block_m: int, block_n: int, split: int, warps: int) -> torch.Tensor:
    m, n = x.shape
    out = torch.zeros(n, device=x.device, dtype=torch.float32)
    rows = triton.cdiv(m, split)
    rows = triton.cdiv(rows, block_m) * block_m
    colsum_kernel[(triton.cdiv(n, block_n), split)](x, out, m, n, rows, BLOCK_M=block_m, BLOCK_N=block_n,
                                                    num_warps=warps)
    return out


def main() -> None:
    args = options(__doc__, ("split", "torch")).parse_args()
    if args.variant != "torch" and (triton is None or not CUDA):
        sys.exit("triton_colsum: the Triton variants need CUDA and Triton")
    m, n, calls = (131072, 1024, 8) if CUDA else (256, 64, 2)
    torch.manual_seed(0)
    x = torch.randn(m, n, device=DEVICE)
    timer = StepTimer()
    out = torch.zeros(n, device=DEVICE)
    for _ in range(args.steps):
        timer.tick()
        for _ in range(calls):
            if args.variant is None:
                out = colsum(x, 32, 32, 1, 4)
            elif args.variant == "split":
                out = colsum(x, 64, 128, 64, 8)
            else:
                out = x.sum(0)
        timer.end()
    timer.report(f"triton_colsum variant={args.variant or 'baseline'} sum {out.sum().item():.3f} "
                 f"err {(out - x.sum(0)).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
