"""A small CNN trained on uint8 images that are augmented per sample in numpy on the training
thread (random crop, horizontal flip, to float, normalise, HWC -> CHW), then uploaded.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/numpy_augment.py
Fixes: --fix workers (the same numpy augmentation in 6 DataLoader workers, pinned memory, prefetch),
--fix gpu_aug (the uint8 batch uploaded whole; crop, flip and normalise done on the GPU as one
gather). Every variant draws the same crops and flips from a per-step seed, so they compute the
same batches. On the GPU: 2048 images of 192x192, crops of 160, batch 96, bf16 autocast,
channels_last, SGD (fp32 on the CPU). Steps are marked by tracekit's optimizer.step() hook; at the end it prints the
mean step time measured without the profiler.
"""

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

SIDE, CROP, BATCH, IMAGES = (192, 160, 96, 2048) if CUDA else (24, 16, 4, 16)
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
POOL = np.random.default_rng(0).integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)


def plan(step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batch `step`'s image ids, crop corners (y, x), flips and labels."""
    rng = np.random.default_rng(1000 + step)
    ids = rng.integers(0, IMAGES, BATCH)
    ys, xs = rng.integers(0, SIDE - CROP + 1, (2, BATCH))
    return ids, ys, xs, rng.random(BATCH) < 0.5, ids % 10


def augment(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The numpy pipeline: one sample at a time."""
    ids, ys, xs, flips, labels = plan(step)
    out = np.empty((BATCH, 3, CROP, CROP), np.float32)
    for j in range(BATCH):
        img = POOL[ids[j], ys[j]:ys[j] + CROP, xs[j]:xs[j] + CROP]
        if flips[j]:
            img = img[:, ::-1]
        out[j] = ((img.astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)
    return torch.from_numpy(out), torch.from_numpy(labels)


class Batches(IterableDataset):
    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        first, every = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(first, self.steps, every):
            yield augment(i)


def gpu_augment(step: int, pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same batch from the uint8 images on the GPU: one gather for crops and flips."""
    ids, ys, xs, flips, labels = plan(step)
    imgs = torch.from_numpy(POOL[ids]).to(DEVICE, non_blocking=True)
    r = torch.arange(CROP, device=DEVICE)
    rows = torch.from_numpy(ys).to(DEVICE)[:, None] + r
    flip = torch.from_numpy(flips).to(DEVICE)[:, None]
    cols = torch.from_numpy(xs).to(DEVICE)[:, None] + torch.where(flip, CROP - 1 - r, r)
    b = torch.arange(BATCH, device=DEVICE)[:, None, None]
    crops = imgs[b, rows[:, :, None], cols[:, None, :]].float()  # (B, CROP, CROP, 3)
    crops = (crops - pool[0]) / pool[1]
    return crops.permute(0, 3, 1, 2), torch.from_numpy(labels).to(DEVICE)


def net() -> nn.Module:
    layers: list[nn.Module] = []
    for cin, cout in ((3, 64), (64, 128), (128, 256), (256, 256)):
        layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def main() -> None:
    args = options(__doc__, ("workers", "gpu_aug")).parse_args()
    torch.manual_seed(0)
    model = net().to(DEVICE, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stats = torch.tensor(np.stack([MEAN, STD]), device=DEVICE)
    if args.fix == "workers":
        batches = iter(DataLoader(Batches(args.steps), batch_size=None, num_workers=6 if CUDA else 2,
                                  pin_memory=CUDA, prefetch_factor=4, persistent_workers=False))
    def loss_of(i: int) -> torch.Tensor:
        if args.fix == "gpu_aug":
            x, y = gpu_augment(i, stats)
        else:
            x, y = next(batches) if args.fix == "workers" else augment(i)
            x, y = x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
        with torch.autocast(DEVICE, torch.bfloat16, enabled=CUDA):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"numpy_augment fix={args.fix or 'none'} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
