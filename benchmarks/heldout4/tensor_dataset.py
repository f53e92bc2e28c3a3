"""A tabular MLP trained from a `TensorDataset` through a default `DataLoader` (shuffle, batch 4096,
no workers): each batch is 4,096 `__getitem__` calls, one row per call, stacked again by
`default_collate` on the training thread, then uploaded from pageable memory.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/tensor_dataset.py
Variants: --variant batch_sampler (the loader's `BatchSampler` indices used to index the whole
tensors at once, batch pinned and copied non-blocking), --variant gpu_resident (the dataset, 1 GB,
copied to the GPU once and indexed there with the same index batches). Same weights and the same
batches in the same order (one seeded `RandomSampler`). On the GPU: 262,144 rows of 1,024 float32
features, MLP 1024 -> 4096 -> 4096 -> 1 (SiLU), bf16 autocast, AdamW(fused), MSE. Each step ends
with tracekit.step().
"""

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def batches(args_variant: str | None, x: torch.Tensor, y: torch.Tensor, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless (features, targets) batches on the device, in one seeded shuffled order per epoch."""
    ds = TensorDataset(x, y)
    gen = torch.Generator().manual_seed(1)
    if args_variant is None:
        while True:
            for xb, yb in DataLoader(ds, batch_size=batch, sampler=RandomSampler(ds, generator=gen), drop_last=True):
                yield xb.to(DEVICE), yb.to(DEVICE)
    xd, yd = (x.to(DEVICE), y.to(DEVICE)) if args_variant == "gpu_resident" else (x, y)
    while True:
        for idx in BatchSampler(RandomSampler(ds, generator=gen), batch, drop_last=True):
            if args_variant == "gpu_resident":
                i = torch.tensor(idx).to(DEVICE, non_blocking=CUDA)
                yield xd[i], yd[i]
            else:
                i = torch.tensor(idx)
                xb, yb = (xd[i].pin_memory(), yd[i].pin_memory()) if CUDA else (xd[i], yd[i])
                yield xb.to(DEVICE, non_blocking=True), yb.to(DEVICE, non_blocking=True)


def main() -> None:
    args = options(__doc__, ("batch_sampler", "gpu_resident")).parse_args()
    rows, feat, hidden, batch = (262144, 1024, 4096, 4096) if CUDA else (512, 16, 32, 64)
    torch.manual_seed(0)
    x = torch.randn(rows, feat)
    y = x[:, :8].sum(1, keepdim=True).sin()
    model = nn.Sequential(nn.Linear(feat, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1)).to(DEVICE)
    opt = adamw(list(model.parameters()))
    it = batches(args.variant, x, y, batch)

    def loss_of(i: int) -> torch.Tensor:
        xb, yb = next(it)
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.mse_loss(model(xb).float(), yb)

    train("tensor_dataset", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
