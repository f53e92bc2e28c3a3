"""A user Triton segment-mean kernel over packed variable-length sequences, launched once per sequence from a Python loop.

Packed batches (the sequences' token rows concatenated, varlen style): 512 sequences of 32..1024
tokens (uniform, ~270k rows) x 2048 bf16 features, 8 such batches pooled per step (8.9 GB read).
The kernel sums one sequence's rows over 32-row tiles in float32 for a 256-column block and
writes the mean. Baseline: `for s in range(512): seg_kernel[(8,)](x, out, s, start_s, len_s, ...)`
with the offsets as Python ints: 4,096 launches of 8 programs per step. Variant `one_launch`: one
launch over a (512, 8) grid per batch reading the offsets from a device tensor (cu_seqlens), the same
tile loop. Identical results (same per-program arithmetic). Without CUDA it runs under
TRITON_INTERPRET=1 at tiny sizes.
"""

import os
import runpy
from pathlib import Path

import torch

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
if not C["CUDA"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

VARIANTS = ("one_launch",)
BLOCK_T, BLOCK_D = 32, 256


@triton.jit
def _pool_rows(x_ptr, out_ptr, seg, start, n, cb, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[seg, cols] = mean of x[start:start + n, cols], summed in float32 over BLOCK_T-row tiles."""
    cols = cb * BLOCK_D + tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for t in range(0, n, BLOCK_T):
        r = t + tl.arange(0, BLOCK_T)
        rows = (start + r).to(tl.int64)
        m = (r[:, None] < n) & (cols[None, :] < D)
        acc += tl.sum(tl.load(x_ptr + rows[:, None] * D + cols[None, :], mask=m, other=0.0).to(tl.float32), axis=0)
    tl.store(out_ptr + seg * D + cols, acc / n, mask=cols < D)


@triton.jit
def seg_kernel(x_ptr, out_ptr, seg, start, n, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """One sequence: grid (column blocks,)."""
    _pool_rows(x_ptr, out_ptr, seg, start, n, tl.program_id(0), D, BLOCK_T, BLOCK_D)


@triton.jit
def varlen_kernel(x_ptr, out_ptr, cu_ptr, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """All sequences: grid (sequences, column blocks), offsets from cu_seqlens on the device."""
    seg = tl.program_id(0)
    start = tl.load(cu_ptr + seg)
    n = tl.load(cu_ptr + seg + 1) - start
    _pool_rows(x_ptr, out_ptr, seg, start, n, tl.program_id(1), D, BLOCK_T, BLOCK_D)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, seqs, lo, hi, nbatch = (2048, 512, 32, 1024, 8) if cuda else (300, 6, 1, 40, 2)
    dt = torch.bfloat16 if cuda else torch.float32
    g, gd = torch.Generator().manual_seed(0), torch.Generator(device=dev).manual_seed(1)
    batches = []
    for _ in range(nbatch):
        lens = torch.randint(lo, hi + 1, (seqs,), generator=g)
        cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
        x = torch.randn(int(cu[-1]), dim, generator=gd, device=dev).to(dt)
        batches.append((x, cu.tolist(), cu.to(dev, torch.int32), torch.empty(seqs, dim, device=dev)))
    nblk = triton.cdiv(dim, BLOCK_D)
    timer, total = C["StepTimer"](), torch.zeros((), dtype=torch.float64, device=dev)
    for _ in range(args.steps):
        timer.tick()
        for x, cu_host, cu_dev, out in batches:
            if args.variant == "one_launch":
                varlen_kernel[(seqs, nblk)](x, out, cu_dev, dim, BLOCK_T=BLOCK_T, BLOCK_D=BLOCK_D, num_warps=4)
            else:
                for s in range(seqs):
                    seg_kernel[(nblk,)](x, out, s, cu_host[s], cu_host[s + 1] - cu_host[s], dim,
                                        BLOCK_T=BLOCK_T, BLOCK_D=BLOCK_D, num_warps=4)
            total += out.sum()
        timer.end()
    timer.report(f"triton_segments variant={args.variant or 'baseline'} checksum {total.item():.6f}")


if __name__ == "__main__":
    main()
