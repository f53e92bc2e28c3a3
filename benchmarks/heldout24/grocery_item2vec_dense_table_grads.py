"""Item2vec on grocery baskets: skip-gram with negative sampling over a 6 M-product catalogue, SGD.

Baseline: both embedding tables are plain `nn.Embedding` (dense gradients). Each step looks up
~164 k rows (16,384 centre items, their context items and 8 negatives each), but autograd returns a
full (6 M, 128) float32 gradient per table (3 GB, zero-filled and then scattered into), and
`torch.optim.SGD` reads every parameter and gradient element and writes every parameter back: ~24
GB of traffic per step (6 GB of zero-fill, 12 GB read, 6 GB written) to change the rows of one batch.
Variant `sparse_grads`: `nn.Embedding(..., sparse=True)`: the gradients are sparse (the looked-up
rows only) and SGD adds them into the tables in place; the same update (SGD without momentum or
weight decay leaves untouched rows unchanged in both variants).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn

VARIANTS = ("sparse_grads",)
ITEMS, DIM, PAIRS, NEGATIVES = (6_000_000, 128, 16_384, 8) if CUDA else (50_000, 32, 256, 4)
BATCHES = 4


class Item2Vec(nn.Module):
    """word2vec's two tables: `centre` (small uniform init) and `context` (zeros)."""

    def __init__(self, sparse: bool) -> None:
        super().__init__()
        self.centre = nn.Embedding(ITEMS, DIM, sparse=sparse)
        self.context = nn.Embedding(ITEMS, DIM, sparse=sparse)
        nn.init.uniform_(self.centre.weight, -0.5 / DIM, 0.5 / DIM)
        nn.init.zeros_(self.context.weight)

    def forward(self, centre: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        u = self.centre(centre)  # (P, D)
        pos = (u * self.context(context)).sum(-1)  # (P,)
        neg = torch.bmm(self.context(negatives), u.unsqueeze(-1)).squeeze(-1)  # (P, K)
        return -(F.logsigmoid(pos).mean() + F.logsigmoid(-neg).sum(-1).mean())


def popular(n: int, gen: torch.Generator) -> torch.Tensor:
    """Product ids skewed towards the popular end of the catalogue (a few staples in most baskets)."""
    return (torch.rand(n, generator=gen, device=DEVICE).pow(3) * ITEMS).long().clamp_(max=ITEMS - 1)


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Item2Vec(sparse=args.variant == "sparse_grads")
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    batches = []
    for _ in range(BATCHES):
        centre = popular(PAIRS, gen)
        # the context item shares the basket: a nearby id in this synthetic catalogue
        context = (centre + torch.randint(-50, 51, (PAIRS,), generator=gen, device=DEVICE)).clamp_(0, ITEMS - 1)
        negatives = popular(PAIRS * NEGATIVES, gen).view(PAIRS, NEGATIVES)
        batches.append((centre, context, negatives))
    # word2vec's step of 0.025 per pair; the loss is a mean over the batch's pairs
    opt = torch.optim.SGD(model.parameters(), lr=0.025 * PAIRS)

    def loss_of(i: int) -> torch.Tensor:
        return model(*batches[i % BATCHES])

    train("grocery_item2vec_dense_table_grads", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
