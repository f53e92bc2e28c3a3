"""Image-classifier training whose GPU augmentation (random affine warp + colour gain) runs one image at a time in a Python loop.

Baseline: a GPU-resident uint8 dataset (4,096 images of 3 x 112 x 112); each step draws 256 images,
and for each image: to float, `F.affine_grid` with its own rotation/scale/shift/flip matrix,
`F.grid_sample` to a 96 x 96 crop (bilinear, reflection padding), a per-channel gain and bias,
normalisation, then `torch.cat` of the 256 crops (~12 small kernels per image, ~3,000 launches per
step); then a ResNet-style CNN (stem 3 -> 64 stride 2, three stages of basic blocks at 64/128/256
channels, pool, 100 classes), bf16 autocast, channels_last, fused AdamW. The augmentation parameters
come from a seeded CPU generator. Variant `batched`: the same augmentation as one batched
`affine_grid` (256 x 2 x 3 matrices), one `grid_sample` over the gathered batch and broadcast
gain/bias/normalisation (the same per-pixel arithmetic).
"""

import math
import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer, adamw, bf16 = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer", "adamw", "bf16"))


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = conv_bn(cin, cout, stride)
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(self.a(x)) + self.skip(x))


def make_model(w: tuple[int, int, int], classes: int) -> nn.Module:
    return nn.Sequential(conv_bn(3, w[0], 2), Block(w[0], w[0], 1), Block(w[0], w[1], 2), Block(w[1], w[2], 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[2], classes))


MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def augment_loop(data: torch.Tensor, idx: torch.Tensor, theta: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor,
                 mean: torch.Tensor, std: torch.Tensor, crop: int) -> torch.Tensor:
    """Per image, as a per-sample transform pipeline would: ~10 small kernels each."""
    outs = []
    for j, k in enumerate(idx.tolist()):  # the sampler's indices, on the host
        img = data[k].float().div(255.0)[None]  # (1, 3, H, W)
        grid = F.affine_grid(theta[j:j + 1], [1, 3, crop, crop], align_corners=False)
        out = F.grid_sample(img, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        out = out * gain[j] + bias[j]
        outs.append((out - mean) / std)
    return torch.cat(outs)


def augment_batched(data: torch.Tensor, idx: torch.Tensor, theta: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor,
                    mean: torch.Tensor, std: torch.Tensor, crop: int) -> torch.Tensor:
    """The same per-pixel arithmetic for the whole batch at once."""
    img = data[idx].float().div(255.0)
    grid = F.affine_grid(theta, [idx.shape[0], 3, crop, crop], align_corners=False)
    out = F.grid_sample(img, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    return (out * gain + bias - mean) / std


def main() -> None:
    args = options(__doc__, ("batched",)).parse_args()
    torch.manual_seed(0)
    # GPU: 256 crops of 96 x 96 from 4,096 images of 112 x 112; CPU check: 6 crops of 24 x 24 from 16 images of 28 x 28
    nimg, side, crop, batch, widths, classes = (4096, 112, 96, 256, (64, 128, 256), 100) if CUDA else (16, 28, 24, 6, (8, 16, 32), 10)
    fmt = torch.channels_last if CUDA else torch.contiguous_format
    model = make_model(widths, classes).to(DEVICE, memory_format=fmt)
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    data = torch.randint(0, 256, (nimg, 3, side, side), device=DEVICE, generator=g, dtype=torch.uint8)
    labels = torch.randint(0, classes, (nimg,), device=DEVICE, generator=g)
    mean = torch.tensor(MEAN, device=DEVICE).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=DEVICE).view(1, 3, 1, 1)

    cpu_g = torch.Generator().manual_seed(2)
    plans = []  # augmentation parameters of 4 batches, drawn on the host and uploaded once
    for _ in range(4):
        idx = torch.randint(0, nimg, (batch,), generator=cpu_g)
        ang = (torch.rand(batch, generator=cpu_g) - 0.5) * (math.pi / 6)
        scale = 0.8 + 0.3 * torch.rand(batch, generator=cpu_g)
        flip = torch.where(torch.rand(batch, generator=cpu_g) < 0.5, -1.0, 1.0)
        shift = (torch.rand(batch, 2, generator=cpu_g) - 0.5) * 0.2
        theta = torch.stack([torch.stack([flip * scale * ang.cos(), -scale * ang.sin(), shift[:, 0]], 1),
                             torch.stack([flip * scale * ang.sin(), scale * ang.cos(), shift[:, 1]], 1)], 1)
        gain = (0.8 + 0.4 * torch.rand(batch, 3, generator=cpu_g)).view(batch, 3, 1, 1)
        bias = ((torch.rand(batch, 3, generator=cpu_g) - 0.5) * 0.1).view(batch, 3, 1, 1)
        plans.append((idx, *(t.to(DEVICE) for t in (idx, theta, gain, bias))))
    augment = augment_batched if args.variant == "batched" else augment_loop

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        idx_host, idx, theta, gain, bias = plans[i % 4]
        x = augment(data, idx if args.variant == "batched" else idx_host, theta, gain, bias, mean, std, crop)
        with bf16():
            loss = F.cross_entropy(model(x.contiguous(memory_format=fmt)).float(), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"gpu_aug_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
