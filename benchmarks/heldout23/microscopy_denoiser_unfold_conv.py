"""Noise2Noise training of a microscopy denoiser whose 3x3 convolutions are unfold + matmul (im2col).

A bias-free DnCNN-style denoiser for fluorescence-microscopy crops (16 crops of 128 x 128 per step,
10 convolutions of 3 x 3 with 96 channels, ReLU, residual noise estimate, bf16 autocast, fused
AdamW), trained Noise2Noise-style on two noisy acquisitions of the same field. Its convolution
module is written as in `nn.Unfold`'s documentation, `F.unfold(x, 3, padding=1)` and a matrix
product with the (C_out, C_in * 9) weight: every layer materialises a 9x-expanded patch matrix
(16 x 864 x 16,384 = 453 MB in bf16) that the GEMM reads, autograd keeps for the weight gradient,
and the backward writes again as a gradient and folds back with `F.fold` (col2im): ~2.3 GB of extra
memory traffic per layer around GEMMs of only 96 output channels.

--variant cudnn_conv2d: `F.conv2d(x, weight, padding=1)` with the same weight tensor: cuDNN's
implicit-GEMM convolution, forward and backward, no patch matrix in memory.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

args = options(__doc__, ("cudnn_conv2d",)).parse_args()
if CUDA:
    CH, LAYERS, BATCH, SIZE, BANK = 96, 10, 16, 128, 64
else:
    CH, LAYERS, BATCH, SIZE, BANK = 8, 3, 2, 16, 4


class Conv3x3(nn.Module):
    """A bias-free 3 x 3 convolution, stride 1, zero padding 1."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, 3, 3) * (2.0 / (9 * cin)) ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if args.variant == "cudnn_conv2d":
            return F.conv2d(x, self.weight, padding=1)
        b, _, h, w = x.shape
        cols = F.unfold(x, 3, padding=1)  # (B, C_in * 9, H * W)
        return (self.weight.flatten(1) @ cols).view(b, -1, h, w)


class Denoiser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        widths = [1] + [CH] * (LAYERS - 1) + [1]
        self.convs = nn.ModuleList([Conv3x3(a, b) for a, b in itertools.pairwise(widths)])

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        x = noisy
        for j, conv in enumerate(self.convs):
            x = conv(x)
            if j < len(self.convs) - 1:
                x = F.relu(x)
        return noisy - x.float()  # the network predicts the noise


torch.manual_seed(0)
with torch.device(DEVICE):
    model = Denoiser()
opt = adamw(list(model.parameters()))
gen = torch.Generator(DEVICE).manual_seed(23)
# smooth "cells" (blurred sparse spots) and two independent noisy acquisitions of each field
spots = (torch.rand(BANK, 1, SIZE, SIZE, device=DEVICE, generator=gen) < 0.02).float()
clean = F.avg_pool2d(F.avg_pool2d(spots, 5, 1, 2), 5, 1, 2) * 20
noisy_a = clean + 0.2 * torch.randn(clean.shape, device=DEVICE, generator=gen)
noisy_b = clean + 0.2 * torch.randn(clean.shape, device=DEVICE, generator=gen)

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    rows = torch.arange(i * BATCH, (i + 1) * BATCH, device=DEVICE) % BANK
    with bf16():
        est = model(noisy_a[rows])
    loss = F.mse_loss(est, noisy_b[rows])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    total += loss.detach()
    timer.end()
timer.report(f"microscopy_denoiser_unfold_conv variant={args.variant or 'baseline'} "
             f"mean loss {total.item() / args.steps:.5f}")
