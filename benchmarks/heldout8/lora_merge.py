"""LoRA fine-tuning that merges the adapters into the weight on every forward: `F.linear(x, W + s * B @ A)`.

GPT-style decoder, 6 pre-norm blocks (width 2048, 16 heads of 128, causal SDPA, GELU MLP 8192),
frozen bf16 base weights (LayerNorms, projections, embeddings), rank-16 LoRA adapters (float32,
alpha 32) on the q/k/v, output, up and down projections, 8 x 1024 tokens, vocabulary 32,000
(frozen head), bf16 autocast, fused AdamW over the adapters only. The baseline's `LoraLinear`
builds the merged weight each call, so autograd needs the full (out x in) gradient of the merged
weight, a third 8192-token GEMM as large as the forward one per projection, to reach B and A.
Variant (the same function of the same weights):
  factored  `F.linear(x, W) + s * F.linear(F.linear(x, A), B)`: the base GEMM and its input gradient,
            plus rank-16 GEMMs
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options

VARIANTS = ("factored",)
MERGE = True


class LoraLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int, rank: int = 16, alpha: float = 32.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) * d_in ** -0.5, requires_grad=False)
        self.a = nn.Parameter(torch.randn(rank, d_in) * d_in ** -0.5)
        self.b = nn.Parameter(torch.randn(d_out, rank) * 0.02)
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if MERGE:
            return F.linear(x, self.weight + (self.b @ self.a) * self.scale)
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.a), self.b) * self.scale


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = LoraLinear(dim, 3 * dim), LoraLinear(dim, dim)
        self.up, self.down = LoraLinear(dim, 4 * dim), LoraLinear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def main() -> None:
    global MERGE
    args = options(__doc__, VARIANTS).parse_args()
    MERGE = args.variant is None
    torch.manual_seed(0)
    dim, heads, layers, vocab, batch, seq = (2048, 16, 6, 32000, 8, 1024) if CUDA else (64, 4, 2, 500, 2, 32)
    blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers)).to(DEVICE)
    emb, norm, head = nn.Embedding(vocab, dim).to(DEVICE), nn.LayerNorm(dim).to(DEVICE), nn.Linear(dim, vocab, bias=False).to(DEVICE)
    base_dt = torch.bfloat16 if CUDA else torch.float32
    adapters = []
    for name, p in [*blocks.named_parameters(), *emb.named_parameters(), *norm.named_parameters(), *head.named_parameters()]:
        if name.endswith((".a", ".b")):
            adapters.append(p)
        else:
            p.requires_grad_(False)
            p.data = p.data.to(base_dt)
    opt = adamw(adapters)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=DEVICE, generator=gen)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            x = emb(data[i % 4, :, :-1])
            for blk in blocks:
                x = blk(x)
            loss = F.cross_entropy(head(norm(x)).flatten(0, 1).float(), data[i % 4, :, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"lora_merge variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
