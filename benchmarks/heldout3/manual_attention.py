"""A pre-norm transformer encoder written by hand, attention as `softmax(q @ k^T / sqrt(d)) @ v` with
separate q, k and v projections (no mask).

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/manual_attention.py
Variants: --variant sdpa (`F.scaled_dot_product_attention` on the same q, k, v), --variant
sdpa_fused_qkv (that with one Linear(d, 3d) whose weight is the concatenation of q, k and v). On the
GPU: 4 layers, width 1024, 16 heads (head dim 64), 4 x 2048 tokens, MLP 4096 GELU, bf16 autocast,
AdamW(fused). Each step ends with tracekit.step().
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn


class Block(nn.Module):
    """LayerNorm -> attention -> residual, LayerNorm -> GELU MLP -> residual."""

    def __init__(self, dim: int, heads: int, how: str | None) -> None:
        super().__init__()
        self.heads, self.how = heads, how
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        q, k, v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        if how == "sdpa_fused_qkv":  # the same weights as one (3d, d) matrix; no extra random draws
            self.qkv_w = nn.Parameter(torch.cat([q.weight, k.weight, v.weight]).detach())
            self.qkv_b = nn.Parameter(torch.cat([q.bias, k.bias, v.bias]).detach())
        else:
            self.q, self.k, self.v = q, k, v
        self.o = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.n1(x)
        if self.how == "sdpa_fused_qkv":
            q, k, v = F.linear(h, self.qkv_w, self.qkv_b).split(d, dim=-1)
        else:
            q, k, v = self.q(h), self.k(h), self.v(h)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.how is None:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            a = scores.softmax(-1) @ v
        else:
            a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.n2(x))


def main() -> None:
    args = options(__doc__, ("sdpa", "sdpa_fused_qkv")).parse_args()
    dim, heads, layers, batch, seq = (1024, 16, 4, 4, 2048) if CUDA else (32, 4, 2, 2, 16)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim, heads, args.variant) for _ in range(layers)], nn.LayerNorm(dim), nn.Linear(dim, 1000)).to(DEVICE)
    opt = adamw(list(model.parameters()))
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, 1000, (batch, seq), device=DEVICE)
    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())

    train("manual_attention", args.variant, args.steps, opt, loss_of)

if __name__ == "__main__":
    main()
