"""A user Triton row softmax over a 32,000-token vocabulary, one whole row per program, at 4 warps.

Distillation-style teacher inference: 8 chunks of 4,096 tokens per step, each `h @ W^T` (bf16,
width 1024 -> 32,000 logits, cuBLAS) then the probabilities by a tutorial-style Triton softmax that
loads the whole row as one block (BLOCK = next power of two = 32,768, float32 math, bf16 out), then
the teacher's probability of each target token. The baseline launches it with num_warps=4: 128
threads hold 32,768 float32 values, 256 per thread, more than the register file allows, so the
row lives in spilled local memory. Variants (the same probabilities):
  warps16  the same kernel at num_warps=16 (64 values per thread)
  torch    `torch.softmax(logits, -1)` (PyTorch's own row softmax kernel)
Without CUDA the script sets TRITON_INTERPRET=1 itself and runs float32 at tiny sizes.
"""

import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("warps16", "torch")


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, warps: int) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=triton.next_power_of_2(cols), num_warps=warps)
    return out


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, vocab, rows, chunks = (1024, 32000, 4096, 8) if CUDA else (64, 1000, 64, 2)
    dt = torch.bfloat16 if CUDA else torch.float32
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    w = (torch.randn(vocab, dim, device=DEVICE, generator=gen) * dim ** -0.5).to(dt)
    hs = torch.randn(4, chunks, rows, dim, device=DEVICE, generator=gen).to(dt) * 2
    targets = torch.randint(0, vocab, (4, chunks, rows, 1), device=DEVICE, generator=gen)
    warps = 16 if args.variant == "warps16" else 4
    check = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            for c in range(chunks):
                logits = hs[i % 4, c] @ w.T
                probs = torch.softmax(logits, -1) if args.variant == "torch" else softmax(logits, warps)
                check += probs.gather(1, targets[i % 4, c]).float().sum()
            timer.end()
    timer.report(f"triton_softmax variant={args.variant or 'baseline'} target-probability checksum {check.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
