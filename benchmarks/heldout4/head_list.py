"""A GPT written the way the from-scratch tutorials build multi-head attention: a `ModuleList` of
`Head` modules, each with its own key/query/value `Linear(n_embd, head_size)`, outputs concatenated
— so every projection is a narrow N = 64 GEMM, 36 of them per layer forward.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/head_list.py
Variant: --variant fused (the per-head weights stacked into one Linear(n_embd, 3 x n_embd) and one
SDPA call over all heads). Same weights (the fused weight is the heads' weights concatenated) and
tokens. On the GPU: 6 layers, n_embd 768, 12 heads of 64, context 1024, batch 16, vocab 32k, causal
SDPA (flash), bf16 autocast, AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn


class Head(nn.Module):
    """One head: its own q/k/v projections and causal SDPA."""

    def __init__(self, dim: int, size: int) -> None:
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(dim, size, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x)[:, None], self.key(x)[:, None], self.value(x)[:, None]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, 0]


class Block(nn.Module):
    """Pre-norm attention (per-head modules, or one fused projection) and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(Head(dim, dim // heads) for _ in range(heads))
        self.proj = nn.Linear(dim, dim)
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.qkv: nn.Linear | None = None

    def fuse(self) -> None:
        """Replace the heads by one Linear whose rows are every head's query, then key, then value rows."""
        heads = list(self.heads)
        w = torch.cat([torch.cat([getattr(h, name).weight for h in heads]) for name in ("query", "key", "value")])
        self.qkv = nn.Linear(w.shape[1], w.shape[0], bias=False).to(w.device)
        with torch.no_grad():
            self.qkv.weight.copy_(w)
        self.nh = len(heads)
        del self.heads

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        if self.qkv is None:
            return torch.cat([h(x) for h in self.heads], dim=-1)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.nh, d // self.nh).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.proj(self.attend(self.n1(x)))
        return x + self.mlp(self.n2(x))


def main() -> None:
    args = options(__doc__, ("fused",)).parse_args()
    dim, heads, layers, ctx, batch, vocab = (768, 12, 6, 1024, 16, 32000) if CUDA else (32, 4, 2, 16, 2, 100)
    torch.manual_seed(0)
    tok, pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
    blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
    norm, head = nn.LayerNorm(dim), nn.Linear(dim, vocab)
    model = nn.ModuleList([tok, pos, blocks, norm, head]).to(DEVICE)
    ids = torch.randint(0, vocab, (batch, ctx + 1), device=DEVICE)
    if args.variant == "fused":
        for blk in blocks:
            blk.fuse()  # type: ignore[operator]
    opt = adamw(list(model.parameters()))
    where = torch.arange(ctx, device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            x = tok(ids[:, :-1]) + pos(where)
            for blk in blocks:
                x = blk(x)
            return F.cross_entropy(head(norm(x)).float().flatten(0, 1), ids[:, 1:].flatten())

    train("head_list", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
