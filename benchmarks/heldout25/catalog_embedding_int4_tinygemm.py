"""Nightly catalogue re-embedding through int4 weight-only GEMMs (tinygemm) on 16,384-token batches.

A product-search text encoder (6 pre-norm blocks of width 1,024, 16 heads, SDPA, GELU MLPs of
4,096, 30,000-token vocabulary, bf16, mean-pooled, L2-normalised embeddings) was quantized to int4
weight-only for the latency-critical query path (groups of 128 along K, asymmetric scales and zero
points, tinygemm's packed layout as gpt-fast / torchao's int4 weight-only, `torch._weight_int4pack_mm`
on every Linear). The nightly job re-embeds the catalogue with the same module: 64 product
descriptions x 256 tokens per step, ~2.5 TFLOP of Linear work.

Baseline: the batch job keeps the int4 weight-only kernel. Weight-only int4 pays off where a GEMM
is bound by reading its weights (decode, a few rows); here each GEMM has 16,384 rows and is bound by
compute, and the kernel, built for small batches, dequantizes the int4 tiles again for every block of
rows and runs far below cuBLAS' bf16 rate.

Variant `dequantized_bf16`: the same int4 weights, dequantized once at load to bf16 ((q - 8) * scale
+ zero), and cuBLAS bf16 GEMMs (`F.linear`) for this compute-bound batch path.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, options
from torch import nn

NAME = "catalog_embedding_int4_tinygemm"
VARIANTS = ("dequantized_bf16",)

if CUDA:
    DIM, HEADS, DEPTH, VOCAB, ITEMS, TOKENS, GROUP = 1024, 16, 6, 30000, 64, 256, 128
else:  # tiny check of the script on the CPU
    DIM, HEADS, DEPTH, VOCAB, ITEMS, TOKENS, GROUP = 128, 4, 2, 500, 4, 16, 32
INNER_K_TILES, POOL = 8, 4


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class Int4Linear(nn.Module):
    """A Linear quantized to int4 (groups of GROUP along K); served by tinygemm or, dequantized once, by cuBLAS."""

    def __init__(self, lin: nn.Linear, tinygemm: bool, dtype: torch.dtype) -> None:
        super().__init__()
        w = lin.weight.detach().float()
        n, k = w.shape
        groups = w.reshape(-1, GROUP)
        lo, hi = groups.amin(1, keepdim=True), groups.amax(1, keepdim=True)
        scale = (hi - lo).clamp(min=1e-6) / 15
        zero = lo + scale * 8
        q = groups.sub(lo).div(scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        sz = torch.cat([scale.view(n, k // GROUP, 1), zero.view(n, k // GROUP, 1)], 2).transpose(0, 1)
        self.sz = sz.contiguous().to(dtype)  # (K / GROUP, N, 2), as the kernel reads it
        self.bias = lin.bias.detach().to(dtype)
        self.tinygemm = tinygemm
        if tinygemm:
            if CUDA:
                self.packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                                INNER_K_TILES)
            else:
                self.packed = torch._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES)
        else:
            s = self.sz[..., 0].float().t().repeat_interleave(GROUP, 1)
            z = self.sz[..., 1].float().t().repeat_interleave(GROUP, 1)
            self.weight = ((q.float() - 8) * s + z).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        if not self.tinygemm:
            y = F.linear(x2, self.weight, self.bias)
        elif CUDA:
            y = torch._weight_int4pack_mm(x2, self.packed, GROUP, self.sz) + self.bias
        else:
            y = torch._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP, self.sz) + self.bias
        return y.view(*x.shape[:-1], y.shape[-1])


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        for blk in self.blocks:
            x = blk(x, sdpa)
        return F.normalize(self.norm(x).mean(1).float(), dim=-1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = Encoder().to(dtype).eval()
        for blk in model.blocks:
            for name in ("qkv", "o", "up", "down"):
                setattr(blk, name, Int4Linear(getattr(blk, name), args.variant != "dequantized_bf16", dtype))

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    ids = torch.randint(0, VOCAB, (POOL, ITEMS, TOKENS), generator=gen, device=DEVICE)
    probe = F.normalize(torch.randn(DIM, generator=gen, device=DEVICE), dim=0)

    score = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            emb = model(ids[i % POOL])
            score += (emb @ probe).double().sum()
            timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} probe-similarity sum {score.item():.6f}")


if __name__ == "__main__":
    main()
