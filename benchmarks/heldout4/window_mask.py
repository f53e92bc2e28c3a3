"""A long-context decoder with causal sliding-window (local) attention written as a dense (L, L)
boolean mask handed to `F.scaled_dot_product_attention`: every query is scored against every key,
and all but a window of them are masked away.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/window_mask.py
Variant: --variant chunked (queries split into chunks of the window size, each attending only to
its own and the previous chunk's keys under a (window, 2 x window) mask; the allowed keys are
exactly the same). Same weights and tokens. On the GPU: 2 pre-norm layers (width 1024, 16 heads of
64, MLP 4096), batch 2 x 16,384 tokens, window 512, bf16 autocast, AdamW(fused), the mask built
once on the GPU. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, options, train
from torch import nn


def dense_mask(length: int, window: int) -> torch.Tensor:
    """True where key j may be seen by query i: i - window < j <= i."""
    i = torch.arange(length, device=DEVICE)[:, None]
    j = torch.arange(length, device=DEVICE)[None, :]
    return (j <= i) & (j > i - window)


def chunk_mask(length: int, window: int) -> torch.Tensor:
    """(chunks, window, 2 x window): the same rule for chunk c's queries over chunks c-1 and c."""
    c = torch.arange(length // window, device=DEVICE)[:, None, None]
    i = c * window + torch.arange(window, device=DEVICE)[None, :, None]
    j = c * window - window + torch.arange(2 * window, device=DEVICE)[None, None, :]
    return (j <= i) & (j > i - window) & (j >= 0)


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, window: int) -> torch.Tensor:
    """Local attention over (B, H, L, D) as SDPA on (B x chunks, H, window, D) against 2 x window keys."""
    b, h, length, d = q.shape
    n = length // window

    def chunks(t: torch.Tensor) -> torch.Tensor:
        return t.view(b, h, n, window, d).permute(0, 2, 1, 3, 4)

    def pairs(t: torch.Tensor) -> torch.Tensor:
        cur = chunks(t)
        prev = torch.cat([torch.zeros_like(cur[:, :1]), cur[:, :-1]], dim=1)
        return torch.cat([prev, cur], dim=3).reshape(b * n, h, 2 * window, d)

    out = F.scaled_dot_product_attention(chunks(q).reshape(b * n, h, window, d), pairs(k), pairs(v), attn_mask=mask)
    return out.view(b, n, h, window, d).permute(0, 2, 1, 3, 4).reshape(b, h, length, d)


def main() -> None:
    args = options(__doc__, ("chunked",)).parse_args()
    dim, heads, layers, batch, length, window, vocab = (1024, 16, 2, 2, 16384, 512, 32000) if CUDA else (32, 4, 2, 2, 64, 16, 100)
    chunked = args.variant == "chunked"
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, dim).to(DEVICE)
    body = nn.ModuleList(AttnBlock(dim, heads) for _ in range(layers)).to(DEVICE)
    head = nn.Linear(dim, vocab).to(DEVICE)
    opt = adamw([*emb.parameters(), *body.parameters(), *head.parameters()])
    ids = torch.randint(0, vocab, (batch, length + 1), device=DEVICE)
    if chunked:
        mask = chunk_mask(length, window)[:, None].repeat(batch, 1, 1, 1)
    else:
        mask = dense_mask(length, window)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if chunked:
            return chunked_attention(q, k, v, mask, window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            x = emb(ids[:, :-1])
            for layer in body:
                x = layer(x, attend)
            return F.cross_entropy(head(x).float().flatten(0, 1), ids[:, 1:].flatten())

    train("window_mask", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
