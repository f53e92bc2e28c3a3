"""Fast CIFAR-10-style training from a GPU-resident dataset (1,024 images a step) with per-image crop and flip in a Python loop.

Baseline: the standard augmentation (random 32 x 32 crop of the 4-pixel-padded 40 x 40 image,
random horizontal flip) applied image by image on the GPU: for each of the 1,024 images a slice, a
`flip` for about half of them and a copy into the batch: ~1,500 tiny kernels launched from a Python
loop every step while the network's own kernels wait behind them. Variant `batched_gather`: the same
crops and flips as one advanced-indexing gather over the whole batch (row and column indices per
image, the column indices reversed where flipped). The offsets and flips are drawn on the CPU from
the same seeded generator in both: identical batches.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

IMAGES, BATCH, WIDTHS = (16384, 1024, (64, 256, 256)) if CUDA else (64, 8, (8, 16, 16))
PAD, CROP = 4, 32
MEAN = torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1)
STD = torch.tensor([0.25, 0.24, 0.26]).view(1, 3, 1, 1)


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(cout), nn.GELU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU())


def main() -> None:
    args = options(__doc__, ("batched_gather",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.GELU(),
                            block(32, WIDTHS[0]), block(WIDTHS[0], WIDTHS[1]), block(WIDTHS[1], WIDTHS[2]),
                            nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(WIDTHS[2], 10))
    net = net.to(memory_format=torch.channels_last)
    opt = adamw(list(net.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    side = CROP + 2 * PAD
    data = torch.randint(0, 256, (IMAGES, 3, CROP, CROP), generator=gen, device=DEVICE, dtype=torch.uint8)
    data = F.pad(data, (PAD, PAD, PAD, PAD))  # stored padded, as the fast CIFAR trainers keep it
    labels = torch.randint(0, 10, (IMAGES,), generator=gen, device=DEVICE)
    mean, std = MEAN.to(DEVICE), STD.to(DEVICE)
    picks = torch.Generator().manual_seed(21)
    ar = torch.arange(CROP, device=DEVICE)
    batched = args.variant == "batched_gather"

    def augment(x: torch.Tensor) -> torch.Tensor:
        ys = torch.randint(0, side - CROP + 1, (BATCH,), generator=picks)
        xs = torch.randint(0, side - CROP + 1, (BATCH,), generator=picks)
        flips = torch.rand(BATCH, generator=picks) < 0.5
        if batched:
            rows = ys.to(DEVICE)[:, None] + ar  # (B, CROP)
            cols = xs.to(DEVICE)[:, None] + ar
            cols = torch.where(flips.to(DEVICE)[:, None], cols.flip(1), cols)
            b = torch.arange(BATCH, device=DEVICE)[:, None, None, None]
            c = torch.arange(3, device=DEVICE)[None, :, None, None]
            return x[b, c, rows[:, None, :, None], cols[:, None, None, :]]
        out = torch.empty(BATCH, 3, CROP, CROP, dtype=x.dtype, device=DEVICE)
        for i, (y0, x0, f) in enumerate(zip(ys.tolist(), xs.tolist(), flips.tolist(), strict=True)):
            crop = x[i, :, y0:y0 + CROP, x0:x0 + CROP]
            out[i] = crop.flip(-1) if f else crop
        return out

    def loss_of(i: int) -> torch.Tensor:
        idx = torch.randint(0, IMAGES, (BATCH,), generator=picks).to(DEVICE)
        imgs = augment(data[idx])
        inp = ((imgs.float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)
        with bf16():
            logits = net(inp)
        return F.cross_entropy(logits.float(), labels[idx])

    train("cifar_per_sample_augment", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
