"""An inference MLP whose bias + tanh-GELU between the two GEMMs is a user Triton kernel, launched
with a tiny block: 32 elements and 1 warp per program, so the 268M-element activation takes
8.4 million programs.

Run: TRITON_INTERPRET=1 (CPU only) tracekit profile --warmup 2 --active 4 benchmarks/heldout4/triton_bias_gelu.py
Variants: --variant block (the same kernel at 2,048 elements and 8 warps per program), --variant
torch (`F.gelu(h + b, approximate="tanh")`). Same weights and inputs. On the GPU: 16,384 tokens,
Linear 4096 -> 16384 (cuBLAS, bf16), the kernel (fp32 math, bf16 in and out), Linear 16384 -> 4096,
one call per step. Without CUDA the kernel runs under TRITON_INTERPRET=1 at tiny sizes (the script
sets it when absent). Each step ends with tracekit.step().
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options


@triton.jit
def bias_gelu_kernel(h_ptr, b_ptr, out_ptr, total, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    x = tl.load(h_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    x += tl.load(b_ptr + offs % cols, mask=ok, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    tl.store(out_ptr + offs, (0.5 * x * (1.0 + tanh)).to(out_ptr.dtype.element_ty), mask=ok)


CONFIGS = {None: {"BLOCK": 32, "num_warps": 1}, "block": {"BLOCK": 2048, "num_warps": 8}}


def bias_gelu(h: torch.Tensor, b: torch.Tensor, variant: str | None) -> torch.Tensor:
    """gelu_tanh(h + b) over a contiguous (rows, cols) h, with the variant's kernel or torch."""
    if variant == "torch":
        return F.gelu(h + b, approximate="tanh")
    out = torch.empty_like(h)
    cfg = CONFIGS[variant]
    grid = (triton.cdiv(h.numel(), cfg["BLOCK"]),)
    bias_gelu_kernel[grid](h, b, out, h.numel(), h.shape[1], **cfg)
    return out


def main() -> None:
    args = options(__doc__, ("block", "torch")).parse_args()
    tokens, dim = (16384, 4096) if CUDA else (32, 16)
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    w1 = (torch.randn(dim, 4 * dim) / dim**0.5).to(DEVICE, dtype)
    b1 = (torch.randn(4 * dim) * 0.1).to(DEVICE, dtype)
    w2 = (torch.randn(4 * dim, dim) / (4 * dim) ** 0.5).to(DEVICE, dtype)
    x = torch.randn(tokens, dim).to(DEVICE, dtype)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE, dtype=torch.float32)
    for _ in range(args.steps):
        timer.tick()
        y = bias_gelu(x @ w1, b1, args.variant) @ w2
        total += y.float().square().mean()
        timer.end()
    timer.report(f"triton_bias_gelu variant={args.variant or 'baseline'} mean output power {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
