"""A DLRM-style click model: 26 sparse features, each its own nn.EmbeddingBag (sum of 4 ids per
bag), concatenated with a dense-feature MLP's output and fed to a top MLP, trained with plain SGD.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/embedding_bags.py
Fixes: --fix concat (the same 26 tables as one concatenated EmbeddingBag, ids shifted by each table's
first row: one lookup and one backward for all features), --fix concat_sparse (that, with sparse
gradients: SGD updates only the rows looked up). On the GPU: tables of 100,000 x 64, batch 4096.
Steps are marked by tracekit's optimizer.step() hook; at the end it prints the mean step time
measured without the profiler.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn

FEATURES, BAG = 26, 4


class Model(nn.Module):
    def __init__(self, rows: int, dim: int, concat: bool, sparse: bool) -> None:
        super().__init__()
        tables = [nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(FEATURES)]
        self.rows, self.concat = rows, concat
        if concat:
            weight = torch.cat([t.weight.detach() for t in tables])  # no new random draws
            self.table = nn.EmbeddingBag.from_pretrained(weight, freeze=False, mode="sum", sparse=sparse)
        else:
            self.tables = nn.ModuleList(tables)
        self.bottom = nn.Sequential(nn.Linear(13, 512), nn.ReLU(), nn.Linear(512, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear((FEATURES + 1) * dim, 1024), nn.ReLU(), nn.Linear(1024, 512),
                                 nn.ReLU(), nn.Linear(512, 1))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """dense (B, 13); ids (B, FEATURES, BAG), each feature's ids in [0, rows)."""
        b = ids.shape[0]
        if self.concat:
            shifted = ids + torch.arange(FEATURES, device=ids.device).view(1, -1, 1) * self.rows
            pooled = self.table(shifted.view(b * FEATURES, BAG)).view(b, -1)
        else:
            pooled = torch.cat([t(ids[:, f]) for f, t in enumerate(self.tables)], 1)
        return self.top(torch.cat([self.bottom(dense), pooled], 1)).squeeze(1)


def main() -> None:
    args = options(__doc__, ("concat", "concat_sparse")).parse_args()
    rows, dim, batch = (100_000, 64, 4096) if CUDA else (100, 8, 16)
    torch.manual_seed(0)
    model = Model(rows, dim, args.fix is not None, args.fix == "concat_sparse").to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator(device=DEVICE).manual_seed(1)
    batches = [(torch.randn(batch, 13, device=DEVICE, generator=g),
                torch.randint(0, rows, (batch, FEATURES, BAG), device=DEVICE, generator=g),
                torch.randint(0, 2, (batch,), device=DEVICE, generator=g).float()) for _ in range(4)]
    def loss_of(i: int) -> torch.Tensor:
        dense, ids, y = batches[i % len(batches)]
        loss = F.binary_cross_entropy_with_logits(model(dense, ids), y)
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"embedding_bags fix={args.fix or 'none'} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
