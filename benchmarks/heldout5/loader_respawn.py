"""Image classifier whose training loop builds a new multi-worker DataLoader for every step's chosen samples.

Each step's 256 sample indices are chosen on the fly (here: a fixed shuffled order); the baseline
wraps them in `DataLoader(Subset(ds, idx), batch_size=256, num_workers=8, pin_memory=True)` and
takes `next(iter(...))`, so 8 worker processes start and stop every step and one of them loads the
whole batch. Each sample is made in `__getitem__` (seeded 3 x 72 x 72 image, random 64 x 64 crop,
flip, normalise). Model: a 4-stage CNN (64-512 channels; channels_last, bf16 autocast), fused AdamW. Variants:
`main_thread` (the per-step loader with `num_workers=0`), `persistent` (one DataLoader over a batch
sampler of all the steps' index lists, 8 workers kept and prefetching).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

VARIANTS = ("main_thread", "persistent")
BATCH, WORKERS, WIDTHS = (256, 8, (64, 128, 256, 512)) if CUDA else (16, 2, (8, 8, 16, 16))
CLASSES = 10
SIZE = 10_000
MEAN = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)


class SeededImages(Dataset[tuple[torch.Tensor, int]]):
    """Sample k: a 3 x 72 x 72 image from seed k, randomly cropped to 64 x 64, maybe flipped, normalised."""

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(k)
        img = torch.rand(3, 72, 72, generator=g)
        top, left = torch.randint(0, 9, (2,), generator=g).tolist()
        img = img[:, top:top + 64, left:left + 64]
        if torch.rand((), generator=g) < 0.5:
            img = img.flip(-1)
        return (img - MEAN) / 0.25, k % CLASSES


def cnn() -> nn.Module:
    """Four stages of two 3x3 conv + BatchNorm + ReLU and a max-pool, then a linear classifier."""
    layers: list[nn.Module] = []
    cin = 3
    for cout in WIDTHS:
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                   nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, CLASSES))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = cnn().to(DEVICE, memory_format=torch.channels_last)
    opt = adamw(list(model.parameters()))
    ds = SeededImages()
    order = torch.randperm(SIZE, generator=torch.Generator().manual_seed(1)).tolist()
    index_lists = [order[i * BATCH:(i + 1) * BATCH] for i in range(args.steps)]
    persistent = iter(DataLoader(ds, batch_sampler=index_lists, num_workers=WORKERS, pin_memory=CUDA)) \
        if args.variant == "persistent" else None

    def loss_of(i: int) -> torch.Tensor:
        if persistent is not None:
            x, y = next(persistent)
        else:
            workers = 0 if args.variant == "main_thread" else WORKERS
            x, y = next(iter(DataLoader(Subset(ds, index_lists[i]), batch_size=BATCH, num_workers=workers, pin_memory=CUDA)))
        x = x.to(DEVICE, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(DEVICE, non_blocking=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            logits = model(x)
        return F.cross_entropy(logits.float(), y)

    train("loader_respawn", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
