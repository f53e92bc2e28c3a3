"""GPT-style decoder trained with activation checkpointing on every block although it uses a few percent of the GPU's memory.

8 pre-norm blocks (width 1024, 16 heads, causal SDPA, GELU MLP 4096), vocab 32k, 8 x 1024 tokens,
bf16 autocast, fused AdamW; each block runs through
`torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`, so backward re-runs every
block's forward. Variant `no_checkpoint`: the blocks called directly.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, options, train
from torch import nn
from torch.utils.checkpoint import checkpoint

VARIANTS = ("no_checkpoint",)
DIM, HEADS, LAYERS, BATCH, SEQ = (1024, 16, 8, 8, 1024) if CUDA else (64, 4, 2, 2, 16)
VOCAB = 32000 if CUDA else 512


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    emb, pos = nn.Embedding(VOCAB, DIM).to(DEVICE), nn.Embedding(SEQ, DIM).to(DEVICE)
    blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS)).to(DEVICE)
    norm, head = nn.LayerNorm(DIM).to(DEVICE), nn.Linear(DIM, VOCAB, bias=False).to(DEVICE)
    params = [p for m in (emb, pos, blocks, norm, head) for p in m.parameters()]
    opt = adamw(params)
    g = torch.Generator(DEVICE).manual_seed(1)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=DEVICE, generator=g) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        ids = data[i % 4]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            x = emb(ids[:, :-1]) + pos.weight
            for block in blocks:
                if args.variant == "no_checkpoint":
                    x = block(x, causal)
                else:
                    x = checkpoint(block, x, causal, use_reentrant=False)
            logits = head(norm(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))

    train("checkpoint_all", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
