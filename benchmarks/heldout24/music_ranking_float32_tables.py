"""Music-streaming candidate ranking whose embedding tables are kept in float32 while the rest of the model runs under bf16 autocast.

A DLRM-style ranker scores 16,384 (listener, track) candidates per step: 24 sparse features
(recent artists, tracks, albums, genres, playlists, ...) each a bag of 64 ids pooled by
`F.embedding_bag(mode="sum")` from a table of 1 M rows x 128, a bottom MLP over 16 dense features,
concatenation and a 3,200 -> 1,024 -> 512 -> 1 top MLP (bf16 autocast, inference).
Baseline: the tables stay in float32 as trained (12.3 GB); autocast does not touch embedding
lookups, so the 25 M rows gathered per step move 12.9 GB, half of it for mantissa bits that the
bf16 MLP above rounds away. The lookups are memory-bound and make up most of the step.
Variant `bf16_tables`: the tables are cast to bf16 once at load (as inference embedding stacks
serve FP16 / BF16 tables); the bags gather half the bytes and sum in float32 inside the kernel.
The scores agree to about three digits.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

VARIANTS = ("bf16_tables",)
CANDIDATES, FEATURES, ROWS, DIM, BAG, DENSE = (16_384, 24, 1_000_000, 128, 64, 16) if CUDA else (8, 24, 1000, 16, 4, 16)


class Ranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tables = nn.ParameterList(nn.Parameter(torch.randn(ROWS, DIM) * 0.05) for _ in range(FEATURES))
        self.bottom = nn.Sequential(nn.Linear(DENSE, 256), nn.ReLU(), nn.Linear(256, DIM), nn.ReLU())
        self.top = nn.Sequential(nn.Linear((FEATURES + 1) * DIM, 1024), nn.ReLU(),
                                 nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        pooled = [F.embedding_bag(ids, table, mode="sum") for ids, table in zip(sparse, self.tables, strict=True)]
        with bf16():
            x = torch.cat([self.bottom(dense), *pooled], 1)
            return torch.sigmoid(self.top(x).float()).squeeze(-1)


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Ranker().eval()
    if args.variant == "bf16_tables":
        model.tables.to(torch.bfloat16)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    requests = []
    for _ in range(3):
        dense = torch.randn(CANDIDATES, DENSE, generator=gen, device=DEVICE)
        sparse = torch.randint(0, ROWS, (FEATURES, CANDIDATES, BAG), generator=gen, device=DEVICE)  # feature-major
        requests.append((dense, sparse))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            total += model(*requests[i % len(requests)]).mean()
            timer.end()
    timer.report(f"music_ranking_float32_tables variant={args.variant or 'baseline'} "
                 f"mean play probability {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
