"""A small CNN trained from a DataLoader whose dataset does per-sample Python work.

Run: tracekit profile sample_traces/scripts/train_dataloader.py            (num_workers=0: starved)
     tracekit profile sample_traces/scripts/train_dataloader.py --fixed    (8 workers, pinned memory)
Steps are marked by tracekit's optimizer.step() hook. The first step holds the model build, the
weight upload and cuDNN's first-use work; the last one is the short tail after the last optimizer
step. At the end it prints the mean step time measured without help from the profiler.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    """Random images with a per-sample Python augmentation (the kind of work that starves a GPU)."""

    def __init__(self, size: int, side: int, work: int) -> None:
        self.size, self.side, self.work = size, side, work

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, self.side, self.side, generator=g)
        jitter = sum(math.sin(i * k) for k in range(self.work)) / max(self.work, 1)  # Python per sample
        return image * (1.0 + 0.01 * jitter), i % 10


def net(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="worker processes + pinned memory")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, side, width, work = (128, 64, 64, 1500) if cuda else (8, 16, 8, 50)
    torch.manual_seed(0)
    data = Augmented(batch * (args.steps + 1), side, work)
    extra = dict(num_workers=8, pin_memory=cuda, persistent_workers=True, prefetch_factor=4) if args.fixed else {}
    loader = DataLoader(data, batch_size=batch, shuffle=False, drop_last=True, **extra)
    model = net(width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for images, labels in loader:
        t0 = time.perf_counter()
        images = images.to(device, non_blocking=args.fixed)
        labels = labels.to(device, non_blocking=args.fixed)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
        if len(times) == args.steps:
            break
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = times[4:] + [end]  # skip the first steps (set-up, worker start-up)
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"loss {loss.item():.4f}; mean step time over steps 4..{len(times) - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
