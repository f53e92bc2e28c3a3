"""Batch-1 greedy decode through two Llama-70B-shaped layers in bf16: every token streams ~4 GB of weights (GEMV-bound).

Two decoder layers of width 8192 (64 query heads and 8 K/V heads of 128, RMSNorm, SwiGLU 28672) and
a 32,000-token head: 1.97B weights. The checkpoint is weight-only int8 with a power-of-two scale per
output row, so the bf16 weights `q.to(bf16) * scale` hold exactly the same values. A static K/V
cache of 1,024 prompt positions per layer (random, fixed); each step decodes 16 tokens from a new
start token (positions 1,024-1,039, rewritten every step), next token = argmax of the logits.
Baseline: `F.linear(x, w_bf16)` for the 15 projections per token (cuBLAS GEMV, 2 bytes per weight).
Variant `int8_weights`: the int8 weights and float32 row scales only, each projection one user Triton
kernel that loads the int8 tile, converts it and multiplies by x in float32, reduces along K and
applies the row scale (1 byte per weight); the products are the same, only the summation order differs.
"""

import os

import torch

if not torch.cuda.is_available():  # the CPU check runs the kernel in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options


@triton.jit
def int8_gemv_kernel(x_ptr, w_ptr, s_ptr, out_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[n] = scale[n] * sum_k x[k] * w[n, k] for int8 w (N, K) row-major, float32 accumulation."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < K
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0)
        x = tl.load(x_ptr + cols, mask=cmask, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, axis=1) * tl.load(s_ptr + rows, mask=rmask, other=0.0)
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=rmask)


class Int8Linear:
    """Weight-only int8 projection: int8 (N, K) weights, float32 per-row scales."""

    BLOCK_N, BLOCK_K, WARPS = 8, 512, 4

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.q, self.scale = q.contiguous(), scale.float().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n, k = self.q.shape
        x = x.reshape(k).contiguous()
        out = torch.empty(n, device=x.device, dtype=x.dtype)
        int8_gemv_kernel[(triton.cdiv(n, self.BLOCK_N),)](x, self.q, self.scale, out, n, k, BLOCK_N=self.BLOCK_N,
                                                          BLOCK_K=self.BLOCK_K, num_warps=self.WARPS)
        return out.view(1, 1, n)


class BF16Linear:
    def __init__(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        self.w = q.to(dtype) * scale.to(dtype)[:, None]  # exact: |q| <= 127, scale a power of two

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def main() -> None:
    args = options(__doc__, ("int8_weights",)).parse_args()
    dim, heads, kv_heads, ffn, vocab, layers, prompt, new = (
        (8192, 64, 8, 28672, 32000, 2, 1024, 16) if CUDA else (64, 4, 2, 160, 100, 2, 32, 4))
    hd = dim // heads
    dtype = torch.bfloat16 if CUDA else torch.float32
    gen = torch.Generator(device=DEVICE).manual_seed(0)

    def quantised(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.randint(-127, 128, (n, k), generator=gen, device=DEVICE, dtype=torch.int8)
        shift = 1 if k > dim else 0  # smaller scales for the long down projection
        scale = torch.exp2(-(torch.randint(12, 15, (n,), generator=gen, device=DEVICE) + shift).float())
        return q, scale

    def linear(n: int, k: int) -> "Int8Linear | BF16Linear":
        q, scale = quantised(n, k)
        return Int8Linear(q, scale) if args.variant == "int8_weights" else BF16Linear(q, scale, dtype)

    blocks = []
    for _ in range(layers):
        blocks.append({"wq": linear(dim, dim), "wk": linear(kv_heads * hd, dim), "wv": linear(kv_heads * hd, dim),
                       "wo": linear(dim, dim), "gate": linear(ffn, dim), "up": linear(ffn, dim), "down": linear(dim, ffn),
                       "k": torch.randn(1, kv_heads, prompt + new, hd, generator=gen, device=DEVICE).to(dtype),
                       "v": torch.randn(1, kv_heads, prompt + new, hd, generator=gen, device=DEVICE).to(dtype)})
    head = linear(vocab, dim)
    emb = (torch.randn(vocab, dim, generator=gen, device=DEVICE) * 0.5).to(dtype)
    norm_w = torch.ones(dim, device=DEVICE, dtype=dtype)
    starts = torch.randint(0, vocab, (args.steps,), generator=gen, device=DEVICE)

    def forward(tok: torch.Tensor, pos: int) -> torch.Tensor:
        x = emb[tok].view(1, 1, dim)
        for b in blocks:
            h = rms_norm(x, norm_w)
            q = b["wq"](h).view(1, 1, heads, hd).transpose(1, 2)
            b["k"][:, :, pos] = b["wk"](h).view(1, kv_heads, hd)
            b["v"][:, :, pos] = b["wv"](h).view(1, kv_heads, hd)
            att = F.scaled_dot_product_attention(q, b["k"][:, :, : pos + 1], b["v"][:, :, : pos + 1], enable_gqa=True)
            x = x + b["wo"](att.transpose(1, 2).reshape(1, 1, dim))
            h = rms_norm(x, norm_w)
            x = x + b["down"](F.silu(b["gate"](h)) * b["up"](h))
        return head(rms_norm(x, norm_w)).view(vocab).float().argmax()

    checksum = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            tok = starts[i]
            for t in range(new):
                tok = forward(tok, prompt + t)
                checksum += tok * (t + 1)
            timer.end()
    timer.report(f"int8_decode variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
