"""A masked-token (MLM-style) training step: a residual MLP encoder over 8 x 512 tokens, and the
vocabulary head applied only to the ~15 % masked positions picked by boolean indexing, `h[mask]`,
whose data-dependent size makes the host wait for the GPU in the middle of every step. The mask is
drawn on the CPU with the batch, as a data pipeline does, in pinned memory.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/masked_loss.py
Fixes: --fix host_index (the masked positions' indices computed on the CPU from the CPU mask,
uploaded with the batch and used by index_select: no sync), --fix ignore_index (the head on every
token and cross_entropy(ignore_index=-100): no sync, 6.7x the head FLOPs). All variants compute the
same loss. On the GPU: width 768, 4 blocks (MLP 3072), vocab 32,000, bf16 autocast, AdamW.
Steps are marked by tracekit's optimizer.step() hook; at the end it prints the mean step time
measured without the profiler.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab: int, dim: int, blocks: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(),
                                                   nn.Linear(4 * dim, dim)) for _ in range(blocks)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
        return self.norm(h)


def cpu_batch(step: int, batch: int, seq: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, targets and the 15 % mask of batch `step`, made on the CPU."""
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.rand(batch, seq, generator=g) < 0.15
    out = (ids.masked_fill(mask, 0), ids, mask)
    return tuple(t.pin_memory() for t in out) if CUDA else out  # type: ignore[return-value]


def main() -> None:
    args = options(__doc__, ("host_index", "ignore_index")).parse_args()
    batch, seq, dim, blocks, vocab = (8, 512, 768, 4, 32000) if CUDA else (2, 16, 16, 1, 50)
    torch.manual_seed(0)
    model = Encoder(vocab, dim, blocks).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    def loss_of(i: int) -> torch.Tensor:
        inputs, targets, mask = cpu_batch(i, batch, seq, vocab)
        if args.fix == "host_index":
            where = mask.view(-1).nonzero().squeeze(1)  # on the CPU: no GPU wait
            where = where.pin_memory() if CUDA else where
        gpu_mask = mask.to(DEVICE, non_blocking=True)
        inputs, targets = inputs.to(DEVICE, non_blocking=True), targets.to(DEVICE, non_blocking=True)
        with torch.autocast(DEVICE, torch.bfloat16, enabled=CUDA):
            h = model(inputs)
            if args.fix == "ignore_index":
                labels = targets.masked_fill(~gpu_mask, -100)
                loss = F.cross_entropy(model.head(h).flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
            elif args.fix == "host_index":
                where = where.to(DEVICE, non_blocking=True)
                picked = h.flatten(0, 1).index_select(0, where)
                loss = F.cross_entropy(model.head(picked).float(), targets.flatten().index_select(0, where))
            else:
                loss = F.cross_entropy(model.head(h[gpu_mask]).float(), targets[gpu_mask])
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"masked_loss fix={args.fix or 'none'} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
