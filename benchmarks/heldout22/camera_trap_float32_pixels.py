"""Camera-trap species classifier fed float32 pixels over PCIe (precision or memory layout).

Workload: batch inference of a ResNet-18-style classifier (BasicBlocks at 64-512 channels, 60 species,
bf16 weights, channels_last, eval-mode BatchNorm) over camera-trap photos, 256 images of 224 x 224
per step. The loader's batches arrive in pinned host memory (as a `DataLoader(pin_memory=True)`
hands them over; here a pinned bank of two batches) and are copied with `non_blocking=True`.

Cause (baseline): the batches are float32, normalised on the host (torchvision's `ToTensor()` +
`Normalize()` in the loader), 4 bytes per pixel value for 8-bit photos: 154 MB cross PCIe every step
instead of 38.5 MB, and the copy sits in the stream ahead of the forward, which waits for it. For a
light network the transfer is a large share of the step.

Fix (`--variant uint8_transfer`): keep the decoded uint8 pixels in the batch and copy those; convert,
scale and normalise on the GPU (`x.float() / 255`, `(x - mean) / std`), then cast to bf16 in
channels_last as before (what DALI and FFCV pipelines do). The same float32 formula runs on the GPU
instead of the CPU, so the network's inputs and outputs should be the same (at most a float32
rounding step apart, far below the bf16 cast).
"""

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("uint8_transfer",)
BATCH, SIZE, WIDTH = (256, 224, 64) if CUDA else (4, 32, 8)
SPECIES, BANK = 60, 2
DTYPE = torch.bfloat16 if CUDA else torch.float32
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.skip(x))


def resnet18(classes: int) -> nn.Module:
    widths = [WIDTH, 2 * WIDTH, 4 * WIDTH, 8 * WIDTH]
    layers: list[nn.Module] = [nn.Conv2d(3, WIDTH, 7, 2, 3, bias=False), nn.BatchNorm2d(WIDTH), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)]
    cin = WIDTH
    for i, w in enumerate(widths):
        layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def normalise(pixels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float32, the ToTensor + Normalize formula."""
    return (pixels.float() / 255 - mean) / std


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    uint8 = args.variant == "uint8_transfer"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = resnet18(SPECIES).to(DTYPE).to(memory_format=torch.channels_last).eval()
    gen = torch.Generator().manual_seed(1)
    photos = [torch.randint(0, 256, (BATCH, 3, SIZE, SIZE), dtype=torch.uint8, generator=gen) for _ in range(BANK)]
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    # the baseline's batches: what the loader workers produce (ToTensor + Normalize on the host)
    bank = photos if uint8 else [normalise(p, mean, std) for p in photos]
    if CUDA:
        bank = [b.pin_memory() for b in bank]
    mean_d, std_d = mean.to(DEVICE), std.to(DEVICE)
    votes = torch.zeros(SPECIES, device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            x = bank[i % BANK].to(DEVICE, non_blocking=True)
            if uint8:
                x = normalise(x, mean_d, std_d)
            x = x.to(DTYPE).contiguous(memory_format=torch.channels_last)
            probs = model(x).float().softmax(-1)
            votes += probs.sum(0)
            timer.end()
    checksum = (votes * torch.arange(1, SPECIES + 1, device=DEVICE)).sum().item()
    timer.report(f"camera_trap_float32_pixels variant={args.variant or 'baseline'} "
                 f"species-probability checksum {checksum:.4f}")


if __name__ == "__main__":
    main()
