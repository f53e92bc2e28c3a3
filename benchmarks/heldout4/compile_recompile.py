"""A compiled text encoder served on batches whose sequence length changes every step, compiled with
`torch.compile(dynamic=False)` (a static-shape setting copied from a fixed-length benchmark), so each
new length recompiles.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/compile_recompile.py
Variants: --variant dynamic (`torch.compile(dynamic=True)`: one graph symbolic in the length),
--variant bucket (static compile, each batch right-padded to the next multiple of 256 tokens with a
key-padding mask and a masked mean pool, so only 4 shapes ever occur and all are compiled in the
warm-up). Same weights and token batches; the pooled output ignores the padding. On the GPU: 2
pre-norm blocks (width 1024, 16 heads, MLP 4096), vocab 32k, batch 32, length 128 + (389 x step mod
896) (every step a new length; steps 0-3 fall in all four buckets), bf16, inference. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, options
from torch import nn


class Encoder(nn.Module):
    """Embedding, pre-norm blocks (SDPA with an optional boolean key mask), a final norm and a (masked) mean pool."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(AttnBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        x = self.emb(ids)
        mask = None if keep is None else keep[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        x = self.norm(x)
        if keep is None:
            return x.mean(1)
        w = keep.to(x.dtype)[..., None]
        return (x * w).sum(1) / w.sum(1)


def main() -> None:
    args = options(__doc__, ("dynamic", "bucket")).parse_args()
    vocab, dim, heads, layers, batch, base, grow, cap = (32000, 1024, 16, 2, 32, 128, 389, 1024) if CUDA else (100, 32, 4, 2, 2, 8, 5, 32)
    bucket = 256 if CUDA else 16
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    model = Encoder(vocab, dim, heads, layers).to(DEVICE, dtype).eval()
    fn = torch.compile(model, dynamic=args.variant == "dynamic")
    gen = torch.Generator().manual_seed(1)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            length = base + (grow * i) % (cap - base)
            ids = torch.randint(0, vocab, (batch, length), generator=gen).to(DEVICE)
            if args.variant == "bucket":
                padded = -(-length // bucket) * bucket
                keep = torch.zeros(batch, padded, dtype=torch.bool, device=DEVICE)
                keep[:, :length] = True
                out = fn(F.pad(ids, (0, padded - length)), keep)
            else:
                out = fn(ids)
            total += out.float().square().mean()
            timer.end()
    timer.report(f"compile_recompile variant={args.variant or 'baseline'} mean output power {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
