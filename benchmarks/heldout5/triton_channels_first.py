"""Channel-first (B, C, T) sequence model whose per-token RMSNorm over the channels is a user Triton row kernel fed a transposed view.

The activations are kept (B, C, T) as a Conv1d stack keeps them; each of 4 layers normalises every
token over its C channels with a Triton kernel written for (rows, C) input, called on
`x.transpose(1, 2)` (strides (C*T, 1, T)): one program per token loads its C channels T elements
apart. Then a channel mix `W @ h^T` and a residual add, bf16 inference. Variants: `contiguous`
(`x.transpose(1, 2).contiguous()` before the same kernel), `token_tiles` (a kernel over (C, 16-token)
tiles of the channel-first tensor, loads contiguous along T, reduction over C).
"""

import os

import torch
from _common import CUDA, DEVICE, StepTimer, options

if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # the CPU check runs the kernels in Triton's interpreter
import triton
import triton.language as tl

VARIANTS = ("contiguous", "token_tiles")
BATCH, CHANNELS, TOKENS, LAYERS = (16, 1024, 16384, 4) if CUDA else (2, 64, 48, 2)
EPS = 1e-6


@triton.jit
def rms_rows(x_ptr, w_ptr, out_ptr, T, C, s_b, s_t, s_c, eps, BLOCK_C: tl.constexpr):
    """One program per row (b, t): out[b, t, :] = x[b, t, :] * rsqrt(mean(x^2) + eps) * w."""
    row = tl.program_id(0)
    b, t = row // T, row % T
    c = tl.arange(0, BLOCK_C)
    ok = c < C
    x = tl.load(x_ptr + b * s_b + t * s_t + c * s_c, mask=ok, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / C + eps)
    w = tl.load(w_ptr + c, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * C + c, (x * inv * w).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def rms_token_tiles(x_ptr, w_ptr, out_ptr, T, C, s_b, s_c, eps, BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr):
    """One program per (b, BLOCK_T tokens): loads a (C, BLOCK_T) tile contiguous along T, reduces over C."""
    b, tb = tl.program_id(0), tl.program_id(1)
    c = tl.arange(0, BLOCK_C)[:, None]
    t = tb * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
    ok = (c < C) & (t < T)
    x = tl.load(x_ptr + b * s_b + c * s_c + t, mask=ok, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / C + eps)
    w = tl.load(w_ptr + c, mask=c < C, other=0.0).to(tl.float32)
    tl.store(out_ptr + (b * T + t) * C + c, (x * inv[None, :] * w).to(out_ptr.dtype.element_ty), mask=ok)


def rms_channels(x: torch.Tensor, w: torch.Tensor, variant: str | None) -> torch.Tensor:
    """(B, C, T) channel-first in, (B, T, C) token-major normalised out."""
    b, c, t = x.shape
    out = torch.empty(b, t, c, device=x.device, dtype=x.dtype)
    block_c = triton.next_power_of_2(c)
    if variant == "token_tiles":
        assert x.stride(2) == 1
        rms_token_tiles[(b, triton.cdiv(t, 16))](x, w, out, t, c, x.stride(0), x.stride(1), EPS,
                                                 BLOCK_C=block_c, BLOCK_T=16, num_warps=8)
        return out
    rows = x.transpose(1, 2)  # (B, T, C) view, channels T apart
    if variant == "contiguous":
        rows = rows.contiguous()
    rms_rows[(b * t,)](rows, w, out, t, c, rows.stride(0), rows.stride(1), rows.stride(2), EPS,
                       BLOCK_C=block_c, num_warps=4)
    return out


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    dtype = torch.bfloat16 if CUDA else torch.float32
    g = torch.Generator(DEVICE).manual_seed(0)
    feats = torch.randn(BATCH, CHANNELS, TOKENS, device=DEVICE, generator=g).to(dtype)
    norms = [(1.0 + 0.1 * torch.randn(CHANNELS, device=DEVICE, generator=g)).to(dtype) for _ in range(LAYERS)]
    mixes = [(torch.randn(CHANNELS, CHANNELS, device=DEVICE, generator=g) * CHANNELS**-0.5 * 0.5).to(dtype) for _ in range(LAYERS)]
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            x = feats.clone()
            for w_norm, w_mix in zip(norms, mixes, strict=True):
                h = rms_channels(x, w_norm, args.variant)  # (B, T, C)
                x.add_(torch.matmul(w_mix, h.transpose(1, 2)))  # (B, C, T), a 1x1 conv
            total += x.float().abs().mean()
            timer.end()
    timer.report(f"triton_channels_first variant={args.variant or 'baseline'} mean |x| {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
