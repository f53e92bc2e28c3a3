"""Click-through-rate model whose int8 embedding tables are dequantized in full before every lookup (quantization).

Workload: DLRM-style ad click prediction, inference (13 dense features through a 512-256-64 bottom MLP,
16 sparse features with bags of 4 ids looked up in row-wise int8 embedding tables of width 64,
100 k-4 M rows each, 15.6 M rows and 1 GB of int8 in all, float32 scale per row, sum pooling, pairwise
dot-product interaction, a 512-256-1 top MLP in bf16 autocast), 2 requests of 8,192 impressions per step.
The tables were quantized to int8 (per-row symmetric scales) to cut their memory fourfold.

Cause (baseline): each table's forward dequantizes the whole table, `weight = q.float() * scale[:, None]`,
and then looks up the batch's rows in it (the everyday way to put a quantized weight behind
`F.embedding`): ~13 GB of conversion traffic per request (read int8, write float32, read, scale,
write) to look up 524 k rows out of 15.6 M.

Fix (`--variant dequant_after_gather`): gather the batch's int8 rows and their scales first and
dequantize only those (what row-wise quantized embedding kernels such as FBGEMM's do): the same
float32 products of the same int8 values and scales, summed in the same order, so the predictions
are identical.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

VARIANTS = ("dequant_after_gather",)
ROWS = ([4_000_000, 3_000_000, 2_000_000, 2_000_000, 1_000_000, 1_000_000] + [500_000] * 4 + [100_000] * 6
        if CUDA else [500, 300, 200, 100])
DIM, BAG, BATCH, REQUESTS, DENSE = (64, 4, 8192, 2, 13) if CUDA else (8, 4, 16, 2, 13)


def mlp(sizes: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Int8Table(nn.Module):
    """A row-wise int8 embedding table: int8 rows and one float32 scale per row, sum-pooled bags."""

    def __init__(self, rows: int, gen: torch.Generator) -> None:
        super().__init__()
        self.register_buffer("q", torch.randint(-127, 128, (rows, DIM), dtype=torch.int8, device=DEVICE, generator=gen))
        self.register_buffer("scale", torch.rand(rows, device=DEVICE, generator=gen) * 0.02 / 127)

    def forward(self, ids: torch.Tensor, after_gather: bool) -> torch.Tensor:
        if after_gather:
            vectors = self.q[ids].float() * self.scale[ids].unsqueeze(-1)
        else:
            weight = self.q.float() * self.scale[:, None]
            vectors = F.embedding(ids, weight)
        return vectors.sum(1)  # (batch, DIM)


class DLRM(nn.Module):
    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.bottom = mlp([DENSE, 512, 256, DIM], last_relu=True)
        self.tables = nn.ModuleList(Int8Table(r, gen) for r in ROWS)
        pairs = (len(ROWS) + 1) * len(ROWS) // 2
        self.top = mlp([DIM + pairs, 512, 256, 1], last_relu=False)
        self.triu = torch.triu_indices(len(ROWS) + 1, len(ROWS) + 1, offset=1, device=DEVICE)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor, after_gather: bool) -> torch.Tensor:
        with bf16():
            x = self.bottom(dense).float()
        pooled = [t(sparse[:, f], after_gather) for f, t in enumerate(self.tables)]
        feats = torch.stack([x, *pooled], dim=1)  # (batch, 17, DIM)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.triu[0], self.triu[1]]
        with bf16():
            return torch.sigmoid(self.top(torch.cat([x, inter], dim=1))).float().squeeze(1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    after_gather = args.variant == "dequant_after_gather"
    torch.manual_seed(0)
    gen = torch.Generator(DEVICE).manual_seed(1)
    with torch.device(DEVICE):
        model = DLRM(gen).eval()
    rows = torch.tensor(ROWS, device=DEVICE)
    clicks = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            for _ in range(REQUESTS):
                dense = torch.randn(BATCH, DENSE, device=DEVICE, generator=gen)
                # power-law ids: popular ads and users sit in the low rows
                u = torch.rand(BATCH, len(ROWS), BAG, device=DEVICE, generator=gen)
                sparse = (u**4 * rows[:, None]).long()
                clicks += model(dense, sparse, after_gather).sum()
            timer.end()
    timer.report(f"ctr_int8_tables_full_dequant variant={args.variant or 'baseline'} "
                 f"expected clicks {clicks.item():.6f}")


if __name__ == "__main__":
    main()
