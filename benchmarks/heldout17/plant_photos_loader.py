"""Training a ResNet-style plant-disease classifier whose images are decoded and augmented on the training thread.

A leaf-photo classifier (38 classes, a ResNet-18-like CNN at 128x128, bf16 autocast, channels_last,
fused AdamW) fed by a `torch.utils.data.Dataset` whose `__getitem__` does the usual per-image CPU
work in numpy: it produces the 144x144 RGB uint8 "decoded photo" (synthetic, seeded by the index,
standing in for a JPEG decode), then a random resized crop to 128x128, a random horizontal flip,
brightness/contrast jitter, normalisation and the HWC -> CHW transpose. The baseline builds the
`DataLoader` the way most first scripts do, `DataLoader(ds, batch_size=64, shuffle=True)`:
`num_workers=0`, so all that work runs in the training loop's own thread, between the GPU steps.

Variants:
- baseline: `num_workers=0` (loading on the main thread), pageable host memory, blocking copies.
- worker_loader: `num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4`, and
  `non_blocking=True` copies: the batches are prepared by worker processes ahead of the step.

Both see the same images in the same order (a seeded sampler; each image's augmentation is seeded
by its index).

Sources: the `torch.utils.data.DataLoader` docstring (installed torch 2.13: `num_workers` "0 means
that the data will be loaded in the main process", `pin_memory`, `persistent_workers`,
`prefetch_factor`) and the PyTorch performance tuning guide's first item, "enable asynchronous data
loading and augmentation" (cited from memory).
"""

import os

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.466, 0.489, 0.410], dtype=np.float32)
STD = np.array([0.177, 0.152, 0.193], dtype=np.float32)


class LeafPhotos(Dataset):
    """Synthetic photos, one per index, augmented with numpy as a torchvision-style pipeline would."""

    def __init__(self, n: int, raw: int, out: int, classes: int) -> None:
        self.n, self.raw, self.out, self.classes = n, raw, out, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(idx)
        # "decode": a smooth colour field plus sensor noise (stands in for reading a JPEG)
        yy, xx = np.mgrid[0 : self.raw, 0 : self.raw].astype(np.float32) / self.raw
        base = np.stack([np.sin(6 * xx + rng.random()), np.cos(5 * yy + rng.random()), xx * yy], axis=-1)
        img = np.clip((base * 0.5 + 0.5) * 255 + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        # RandomResizedCrop (scale 0.35-1, nearest), RandomHorizontalFlip, ColorJitter, Normalize, ToTensor
        side = int(self.raw * np.sqrt(rng.uniform(0.35, 1.0)))
        top, left = rng.integers(0, self.raw - side + 1, size=2)
        rows = top + (np.arange(self.out) * side // self.out)
        cols = left + (np.arange(self.out) * side // self.out)
        crop = img[rows][:, cols].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crop = crop * rng.uniform(0.8, 1.2)
        crop = (crop - crop.mean()) * rng.uniform(0.8, 1.2) + crop.mean()
        crop = (np.clip(crop, 0, 1) - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1))), int(rng.integers(self.classes))


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.down(x) + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def resnet18ish(classes: int, width: int) -> nn.Module:
    w = [width, 2 * width, 4 * width, 8 * width]
    layers: list[nn.Module] = [nn.Conv2d(3, w[0], 7, 2, 3, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = w[0]
    for i, c in enumerate(w):
        layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
        cin = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def main() -> None:
    args = options(__doc__, ("worker_loader",)).parse_args()
    torch.manual_seed(0)
    batch, raw, out, width = (64, 144, 128, 64) if CUDA else (4, 40, 32, 8)
    classes = 38
    ds = LeafPhotos(batch * (args.steps + 2), raw, out, classes)
    sampler_gen = torch.Generator().manual_seed(3)
    if args.variant == "worker_loader":
        workers = min(8, os.cpu_count() or 1)
        loader = DataLoader(ds, batch_size=batch, shuffle=True, generator=sampler_gen, num_workers=workers,
                            pin_memory=CUDA, persistent_workers=True, prefetch_factor=4)
    else:
        loader = DataLoader(ds, batch_size=batch, shuffle=True, generator=sampler_gen)
    non_blocking = args.variant == "worker_loader"
    with torch.device(DEVICE):
        model = resnet18ish(classes, width).to(memory_format=torch.channels_last)
    opt = adamw(list(model.parameters()))
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    it = iter(loader)
    for _ in range(args.steps):
        timer.tick()
        x, y = next(it)
        x = x.to(DEVICE, non_blocking=non_blocking).contiguous(memory_format=torch.channels_last)
        y = y.to(DEVICE, non_blocking=non_blocking)
        with bf16():
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"plant_photos_loader variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
