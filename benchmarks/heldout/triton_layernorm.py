"""A user Triton LayerNorm forward (the tutorial's three-pass row loop: mean, variance, normalise)
launched with a small BLOCK_SIZE of 256 and one warp, on fp16 rows of 4096, 16 calls per step.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/triton_layernorm.py
Fixes: --fix block (BLOCK_SIZE = the next power of two of the row, 4096, with 8 warps: one pass per
loop), --fix torch (F.layer_norm). On the GPU: 32,768 rows x 4096. One step (tracekit.step()) per 16
normalisations; at the end it prints the mean step time measured without the profiler. Without CUDA
it runs a tiny size under Triton's interpreter (TRITON_INTERPRET=1; under `tracekit profile` set it in
the environment, since tracekit imports triton before this script runs).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, mark_step, options

CALLS, EPS = (16 if torch.cuda.is_available() else 2), 1e-5


@triton.jit
def layer_norm_fwd(X, Y, W, B, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=mask)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, block: int, warps: int) -> torch.Tensor:
    y = torch.empty_like(x)
    layer_norm_fwd[(x.shape[0],)](x, y, w, b, x.stride(0), x.shape[1], EPS, BLOCK_SIZE=block, num_warps=warps)
    return y


def main() -> None:
    args = options(__doc__, ("block", "torch")).parse_args()
    rows, n = (32768, 4096) if CUDA else (8, 64)
    block, warps = (triton.next_power_of_2(n), 8) if args.fix == "block" else (256 if CUDA else 16, 1)
    torch.manual_seed(0)
    xs = [torch.randn(rows, n, device=DEVICE, dtype=torch.float16) for _ in range(2)]
    w = torch.rand(n, device=DEVICE, dtype=torch.float16) + 0.5
    b = torch.randn(n, device=DEVICE, dtype=torch.float16)

    def norm(x: torch.Tensor) -> torch.Tensor:
        if args.fix == "torch":
            return F.layer_norm(x, (n,), w, b, EPS)
        return layer_norm(x, w, b, block, warps)

    ref = F.layer_norm(xs[0].float(), (n,), w.float(), b.float(), EPS)
    err = (norm(xs[0]).float() - ref).abs().max().item()
    assert err < 2e-2, f"layer_norm max error {err}"
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        for i in range(CALLS):
            y = norm(xs[i % 2])
        mark_step()
    gb = CALLS * 2 * rows * n * 2 / 1e9
    how = "F.layer_norm" if args.fix == "torch" else f"block {block}, {warps} warps"
    ms = timer.report(f"triton_layernorm fix={args.fix or 'none'} ({how}) y[0,0] {y[0, 0].item():.4f}")
    print(f"{gb / ms * 1e3:.0f} GB/s over the {gb:.3f} GB read + written per step")


if __name__ == "__main__":
    main()
