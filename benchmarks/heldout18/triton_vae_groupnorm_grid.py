"""Decoding latents with the residual blocks of a VAE decoder (batch 2, 128 channels at 256 x 256,
bf16, inference) whose GroupNorm + SiLU is the user's own Triton kernel, written with one program per
(image, group): the program loops over its group's 4 x 65,536 values twice (statistics, then
normalise-and-store).

Baseline: grid = (batch x 32 groups,) = 64 programs on a GPU with 132 SMs, each walking 262,144
values one 1,024-wide block at a time: most SMs idle, each busy one latency-bound. Variant
`split_grid`: the same GroupNorm + SiLU as two kernels over a (groups, 64 slices) grid (4,096
programs): partial sums per slice, then each program combines its group's 64 partials and
normalises its slice. Same function; fp32 summation order differs (rounding)."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # the CPU check runs the kernels in Triton's interpreter
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

B, C, HW_SIDE, BLOCKS = (2, 128, 256, 8) if CUDA else (1, 16, 8, 1)
GROUPS, EPS, BLOCK, SPLIT = 32 if CUDA else 4, 1e-6, 1024 if CUDA else 64, 64 if CUDA else 4


@triton.jit
def gn_silu_per_group(x_ptr, w_ptr, b_ptr, y_ptr, HW, CG, G, eps, BLOCK: tl.constexpr):
    """One program per (image, group): mean and variance over the group, then silu(norm * w + b)."""
    pid = tl.program_id(0)
    n_elem = HW * CG
    base = pid.to(tl.int64) * n_elem
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_elem, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + offs, mask=offs < n_elem, other=0.0).to(tl.float32)
        acc += v
        acc2 += v * v
    mean = tl.sum(acc) / n_elem
    rstd = 1.0 / tl.sqrt(tl.sum(acc2) / n_elem - mean * mean + eps)
    for start in range(0, n_elem, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n_elem
        ch = (pid % G) * CG + offs // HW
        v = tl.load(x_ptr + base + offs, mask=m, other=0.0).to(tl.float32)
        h = (v - mean) * rstd * tl.load(w_ptr + ch, mask=m, other=1.0) + tl.load(b_ptr + ch, mask=m, other=0.0)
        tl.store(y_ptr + base + offs, (h / (1.0 + tl.exp(-h))).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def gn_partial(x_ptr, part_ptr, n_elem, CHUNK, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """Program (group, slice): the sum and sum of squares of its slice of the group."""
    grp, sl = tl.program_id(0), tl.program_id(1)
    base = grp.to(tl.int64) * n_elem
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, CHUNK, BLOCK):
        offs = sl * CHUNK + start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + offs, mask=offs < n_elem, other=0.0).to(tl.float32)
        acc += v
        acc2 += v * v
    tl.store(part_ptr + (grp * SPLIT + sl) * 2, tl.sum(acc))
    tl.store(part_ptr + (grp * SPLIT + sl) * 2 + 1, tl.sum(acc2))


@triton.jit
def gn_apply(x_ptr, part_ptr, w_ptr, b_ptr, y_ptr, HW, CG, G, CHUNK, eps, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """Program (group, slice): the group's statistics from its SPLIT partials, then its slice."""
    grp, sl = tl.program_id(0), tl.program_id(1)
    n_elem = HW * CG
    base = grp.to(tl.int64) * n_elem
    parts = part_ptr + (grp * SPLIT + tl.arange(0, SPLIT)) * 2
    mean = tl.sum(tl.load(parts)) / n_elem
    rstd = 1.0 / tl.sqrt(tl.sum(tl.load(parts + 1)) / n_elem - mean * mean + eps)
    for start in range(0, CHUNK, BLOCK):
        offs = sl * CHUNK + start + tl.arange(0, BLOCK)
        m = offs < n_elem
        ch = (grp % G) * CG + offs // HW
        v = tl.load(x_ptr + base + offs, mask=m, other=0.0).to(tl.float32)
        h = (v - mean) * rstd * tl.load(w_ptr + ch, mask=m, other=1.0) + tl.load(b_ptr + ch, mask=m, other=0.0)
        tl.store(y_ptr + base + offs, (h / (1.0 + tl.exp(-h))).to(y_ptr.dtype.element_ty), mask=m)


def group_norm_silu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, split: bool) -> torch.Tensor:
    """silu(group_norm(x, GROUPS, w, b)) for a contiguous NCHW x, by either launch layout."""
    n, c, h, wd = x.shape
    y = torch.empty_like(x)
    hw, cg = h * wd, c // GROUPS
    if not split:
        gn_silu_per_group[(n * GROUPS,)](x, w, b, y, hw, cg, GROUPS, EPS, BLOCK=BLOCK, num_warps=4)
        return y
    n_elem = hw * cg
    chunk = triton.cdiv(triton.cdiv(n_elem, SPLIT), BLOCK) * BLOCK
    part = torch.empty(n * GROUPS, SPLIT, 2, device=x.device, dtype=torch.float32)
    gn_partial[(n * GROUPS, SPLIT)](x, part, n_elem, chunk, SPLIT=SPLIT, BLOCK=BLOCK, num_warps=4)
    gn_apply[(n * GROUPS, SPLIT)](x, part, w, b, y, hw, cg, GROUPS, chunk, EPS, SPLIT=SPLIT, BLOCK=BLOCK, num_warps=4)
    return y


class ResBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1, self.b1 = nn.Parameter(1 + 0.1 * torch.randn(C)), nn.Parameter(0.1 * torch.randn(C))
        self.w2, self.b2 = nn.Parameter(1 + 0.1 * torch.randn(C)), nn.Parameter(0.1 * torch.randn(C))
        self.conv1, self.conv2 = nn.Conv2d(C, C, 3, padding=1), nn.Conv2d(C, C, 3, padding=1)

    def forward(self, x: torch.Tensor, split: bool) -> torch.Tensor:
        h = self.conv1(group_norm_silu(x, self.w1, self.b1, split))
        return x + self.conv2(group_norm_silu(h, self.w2, self.b2, split))


def main() -> None:
    args = options(__doc__ or "", ("split_grid",)).parse_args()
    split = args.variant == "split_grid"
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        blocks = nn.ModuleList(ResBlock() for _ in range(BLOCKS)).to(dtype).eval()
        gen = torch.Generator(DEVICE).manual_seed(1)
        feats = torch.randn(2, B, C, HW_SIDE, HW_SIDE, generator=gen).to(dtype)
    if not CUDA:  # the CPU check: the kernels against torch's GroupNorm + SiLU
        x = feats[0]
        ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x, GROUPS, blocks[0].w1, blocks[0].b1, EPS))
        for s in (False, True):
            torch.testing.assert_close(group_norm_silu(x, blocks[0].w1.detach(), blocks[0].b1.detach(), s), ref,
                                       atol=1e-4, rtol=1e-4)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            x = feats[i % 2]
            for blk in blocks:
                x = blk(x, split)
            total += x.float().abs().mean()
            timer.end()
    timer.report(f"triton_vae_groupnorm_grid variant={args.variant or 'baseline'} mean |out| {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
