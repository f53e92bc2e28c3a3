"""Ad click-through model with one `nn.Embedding` per categorical field, looked up in a Python loop.

A DCN-v2-style CTR model (128 categorical fields with 10 to 100,000 values each, 16-d
embeddings, 16 dense features; 3 full-rank cross layers and a 1,024-512 MLP on the 2,064-wide
input; bf16 autocast for the dense part, BCE, fused AdamW; batches of 8,192 impressions). The
embeddings are a `ModuleList` of 128 tables, as in most from-scratch recommendation code:
`torch.cat([emb(x[:, f]) for f, emb in enumerate(self.tables)], 1)`. Each field costs a gather
kernel in the forward and, in the backward, an embedding backward of its own (index sort,
segment sums, zero fill: about ten small kernels), all a few microseconds of GPU work each, so
the step is ~1,500 launches issued one after another from Python.

  baseline           128 tables, 128 lookups and 128 embedding backwards per step
  --variant one_table   the same 128 tables' rows concatenated into one table, looked up once with
                     per-field offsets (`table(x + offsets)`), as table-batched embeddings do

Same weights (the single table is the concatenation of the initialised tables), same data; the
gathered values are identical and the embedding gradients should be too (each row's
contributions are summed in batch order in both).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

DIM, DENSE = 16, 16
if CUDA:
    FIELDS, BATCH, MAX_CARD, HIDDEN = 128, 8192, 100_000, (1024, 512)
else:
    FIELDS, BATCH, MAX_CARD, HIDDEN = 12, 64, 1000, (64, 32)
WIDE = FIELDS * DIM + DENSE


def cardinalities() -> list[int]:
    g = torch.Generator().manual_seed(3)
    logs = torch.rand(FIELDS, generator=g) * (torch.log(torch.tensor(float(MAX_CARD))) - torch.log(torch.tensor(10.0)))
    return [int(v) for v in (torch.exp(logs) * 10).round()]


class DCNv2(nn.Module):
    def __init__(self, cards: list[int], one_table: bool) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(c, DIM) for c in cards)
        if one_table:  # the same rows, one table: built from the initialised tables, which are then dropped
            self.table = nn.Embedding.from_pretrained(torch.cat([t.weight.detach() for t in self.tables]), freeze=False)
            self.tables = nn.ModuleList()
            starts = torch.tensor([0, *cards[:-1]], dtype=torch.long).cumsum(0)
            self.register_buffer("offsets", starts.to(self.table.weight.device))
        self.cross = nn.ModuleList(nn.Linear(WIDE, WIDE) for _ in range(3))
        self.mlp = nn.Sequential(nn.Linear(WIDE, HIDDEN[0]), nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]), nn.ReLU())
        self.out = nn.Linear(HIDDEN[1] + WIDE, 1)

    def embed(self, cat: torch.Tensor) -> torch.Tensor:
        if len(self.tables):
            return torch.cat([emb(cat[:, f]) for f, emb in enumerate(self.tables)], 1)
        return self.table(cat + self.offsets).flatten(1)

    def forward(self, cat: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        x0 = torch.cat([self.embed(cat), dense], 1)
        with bf16():
            x = x0
            for layer in self.cross:
                x = x0 * layer(x) + x
            logit = self.out(torch.cat([self.mlp(x0), x], 1))
        return logit.float().squeeze(1)


def main() -> None:
    args = options(__doc__, ("one_table",)).parse_args()
    torch.manual_seed(0)
    cards = cardinalities()
    with torch.device(DEVICE):
        model = DCNv2(cards, one_table=args.variant == "one_table")
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    card_t = torch.tensor(cards, device=DEVICE, dtype=torch.float32)
    w_click = torch.randn(FIELDS, generator=g, device=DEVICE)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        u = torch.rand(BATCH, FIELDS, generator=g, device=DEVICE)
        cat = (u ** 3 * card_t).long().clamp_max(card_t.long() - 1)  # skewed (popular values first)
        dense = torch.randn(BATCH, DENSE, generator=g, device=DEVICE)
        click = ((torch.cos(cat.float()) * w_click).sum(1) / FIELDS ** 0.5 + dense[:, 0] > 0.8).float()
        loss = F.binary_cross_entropy_with_logits(model(cat, dense), click)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"ctr_per_field_embeddings variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
