"""Encoder built from `nn.MultiheadAttention` called with its defaults, so every call also returns the head-averaged attention weights.

Baseline: each block calls `self.attn(h, h, h)` (need_weights defaults to True), the weights unused.
Variant `no_weights`: `self.attn(h, h, h, need_weights=False)`. 6 pre-norm blocks, width 1024,
16 heads, 8 x 2048 tokens, bf16 autocast, fused AdamW, a token-level regression loss.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

VARIANTS = ("no_weights",)
DIM, HEADS, LAYERS, BATCH, SEQ = (1024, 16, 6, 8, 2048) if CUDA else (64, 4, 2, 2, 32)


class Block(nn.Module):
    """Pre-norm block: multi-head self-attention then a GELU MLP."""

    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.need_weights = need_weights
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        if self.need_weights:
            a, _ = self.attn(h, h, h)
        else:
            a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.mlp(self.n2(x))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.variant != "no_weights") for _ in range(LAYERS)]).to(DEVICE)
    head = nn.Linear(DIM, 1).to(DEVICE)
    params = [*model.parameters(), *head.parameters()]
    opt = adamw(params)
    data = [(torch.randn(BATCH, SEQ, DIM, device=DEVICE), torch.randn(BATCH, SEQ, 1, device=DEVICE)) for _ in range(2)]

    def loss_of(i: int) -> torch.Tensor:
        x, y = data[i % 2]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            out = head(model(x))
        return F.mse_loss(out.float(), y)

    train("mha_need_weights", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
