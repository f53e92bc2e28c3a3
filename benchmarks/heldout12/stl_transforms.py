"""A ConvNeXt trained on STL-10-style images whose PIL augmentations run in a `DataLoader` with `num_workers=0`.

The dataset holds 96 x 96 RGB uint8 images (synthetic) and, like torchvision's dataset classes,
makes a PIL image per sample and applies the training transforms: random-resized crop to 160 px
(bilinear), horizontal flip, brightness and contrast jitter (`ImageEnhance`), to float tensor,
normalise. The loader is the default one (`DataLoader(ds, batch_size=96, sampler=...)`: no
workers), so ~96 PIL pipelines, the collate and a pageable upload run on the training thread every
step. Model: ConvNeXt-Nano-style (timm layout: 4 x 4 patchify stem, stages of 80/160/320/640
channels with 2/2/8/2 blocks of depthwise 7 x 7 conv, LayerNorm, MLP 4x with GELU, layer scale;
LayerNorm + 2 x 2 conv downsampling), 10 classes, bf16 autocast, channels_last, fused AdamW. Each
sample's augmentation draws from `random.Random(index)`, so every variant sees the same images.
Variant `workers`: the same dataset in `DataLoader(..., num_workers=8, pin_memory=True,
persistent_workers=True, prefetch_factor=4)`, non-blocking copies.
"""

import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from PIL import Image, ImageEnhance
from torch import nn
from torch.utils.data import DataLoader, Dataset

args = options(__doc__, ("workers",)).parse_args()
torch.manual_seed(0)
if CUDA:
    DIMS, DEPTHS, BATCH, SIZE = (80, 160, 320, 640), (2, 2, 8, 2), 96, 160
else:
    DIMS, DEPTHS, BATCH, SIZE = (8, 16, 32, 64), (1, 1, 1, 1), 8, 64
MEAN, STD = (0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)


class TrainTransform:
    """RandomResizedCrop(SIZE, scale=(0.35, 1)), RandomHorizontalFlip, brightness/contrast 0.4, ToTensor, Normalize."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def crop_box(self, w: int, h: int, rng: random.Random) -> tuple[int, int, int, int]:
        area = w * h
        for _ in range(10):
            target = area * rng.uniform(0.35, 1.0)
            aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
            if 0 < cw <= w and 0 < ch <= h:
                top, left = rng.randint(0, h - ch), rng.randint(0, w - cw)
                return left, top, left + cw, top + ch
        return 0, 0, w, h

    def __call__(self, img: Image.Image, rng: random.Random) -> torch.Tensor:
        img = img.resize((self.size, self.size), Image.BILINEAR, box=self.crop_box(*img.size, rng))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.6, 1.4))
        img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.6, 1.4))
        t = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return (t - self.mean) / self.std


class STL10Like(Dataset):
    def __init__(self, n: int, transform: TrainTransform) -> None:
        self.data = np.random.default_rng(0).integers(0, 256, (n, 96, 96, 3), dtype=np.uint8)
        self.labels = np.arange(n) % 10
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img = Image.fromarray(self.data[index])
        return self.transform(img, random.Random(index)), int(self.labels[index])


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x).permute(0, 2, 3, 1)
        x = self.fc2(F.gelu(self.fc1(self.norm(x)))) * self.gamma
        return shortcut + x.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, DIMS[0], 4, stride=4), LayerNorm2d(DIMS[0], eps=1e-6))
        stages: list[nn.Module] = []
        for i, (dim, depth) in enumerate(zip(DIMS, DEPTHS, strict=True)):
            down = nn.Identity() if i == 0 else nn.Sequential(LayerNorm2d(DIMS[i - 1], eps=1e-6),
                                                              nn.Conv2d(DIMS[i - 1], dim, 2, stride=2))
            stages.append(nn.Sequential(down, *[ConvNeXtBlock(dim) for _ in range(depth)]))
        self.stages = nn.Sequential(*stages)
        self.head_norm = nn.LayerNorm(DIMS[-1], eps=1e-6)
        self.fc = nn.Linear(DIMS[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(self.head_norm(x.mean((2, 3))))


with torch.device(DEVICE):
    model = ConvNeXt()
if CUDA:
    model = model.to(memory_format=torch.channels_last)
opt = adamw(list(model.parameters()))

dataset = STL10Like(BATCH * args.steps, TrainTransform(SIZE))
order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(2)).tolist()
if args.variant == "workers":
    loader = DataLoader(dataset, batch_size=BATCH, sampler=order, num_workers=8, pin_memory=CUDA,
                        persistent_workers=True, prefetch_factor=4)
else:
    loader = DataLoader(dataset, batch_size=BATCH, sampler=order)
non_blocking = args.variant == "workers"

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
batches = iter(loader)
for _ in range(args.steps):
    timer.tick()
    images, labels = next(batches)
    images = images.to(DEVICE, non_blocking=non_blocking)
    labels = labels.to(DEVICE, non_blocking=non_blocking)
    if CUDA:
        images = images.contiguous(memory_format=torch.channels_last)
    with bf16():
        loss = F.cross_entropy(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    total += loss.detach()
    timer.end()
timer.report(f"stl_transforms variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")
