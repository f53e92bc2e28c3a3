"""Training of an EDSR-baseline x2 super-resolution network (16 residual blocks of two 3 x 3
convolutions at 64 channels, pixel-shuffle upsampler, L1 loss) on 16 LR patches of 128 x 128 under
bf16 autocast, with everything in PyTorch's default NCHW (contiguous) memory format.

Baseline: NCHW tensors and weights: cuDNN's bf16 tensor-core convolutions work in NHWC, so around
the ~100 convolutions of forward and backward it runs layout-conversion kernels (or slower NCHW
kernels), on 16 x 64 x 128 x 128 activations. Variant `channels_last`: the model and the input
batches converted with `.to(memory_format=torch.channels_last)`: no conversions. Same function; bf16
rounding may differ (other kernels)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, adamw, bf16, options, train

B, PATCH, FEATS, RESBLOCKS = (16, 128, 64, 16) if CUDA else (2, 16, 16, 2)
SCALE, BATCHES = 2, 4


class ResBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(FEATS, FEATS, 3, padding=1), nn.Conv2d(FEATS, FEATS, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.1 * self.c2(F.relu(self.c1(x)))  # EDSR's residual scaling


class EDSR(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, FEATS, 3, padding=1)
        self.body = nn.Sequential(*(ResBlock() for _ in range(RESBLOCKS)), nn.Conv2d(FEATS, FEATS, 3, padding=1))
        self.up = nn.Sequential(nn.Conv2d(FEATS, FEATS * SCALE * SCALE, 3, padding=1), nn.PixelShuffle(SCALE))
        self.tail = nn.Conv2d(FEATS, 3, 3, padding=1)

    def forward(self, lr: torch.Tensor) -> torch.Tensor:
        x = self.head(lr)
        return self.tail(self.up(x + self.body(x)))


def main() -> None:
    args = options(__doc__ or "", ("channels_last",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = EDSR()
        gen = torch.Generator(DEVICE).manual_seed(1)
        hr = torch.rand(BATCHES, B, 3, PATCH * SCALE, PATCH * SCALE, generator=gen)
    lrs = [F.avg_pool2d(h, SCALE) for h in hr]  # bicubic stand-in: 2 x 2 average
    hrs = list(hr)
    if args.variant == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        lrs = [x.contiguous(memory_format=torch.channels_last) for x in lrs]
        hrs = [x.contiguous(memory_format=torch.channels_last) for x in hrs]
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        with bf16():
            sr = model(lrs[i % BATCHES])
        return F.l1_loss(sr.float(), hrs[i % BATCHES])

    train("edsr_superres_nchw", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
