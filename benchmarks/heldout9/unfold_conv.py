"""BiT-style ResNet training whose weight-standardised convolutions are written as `F.unfold` (im2col) + matmul.

Baseline: a pre-activation ResNet with GroupNorm and weight-standardised 3x3 convolutions
(BiT/NFNet-style `StdConv2d`): stem 3 -> 64 stride 2 on 128 x 128 images, three stages of two
residual blocks at 64/128/256 channels (64 x 64, 32 x 32, 16 x 16), GroupNorm(32) + ReLU, mean
pool, 100 classes; batch 64, bf16 autocast, fused AdamW. The layer standardises its weight and then
convolves the way a tutorial shows it: `cols = F.unfold(x, 3, padding=1, stride=s)` (9x the input:
a (64, 576, 4096) tensor at the first stage), `w.view(out, -1) @ cols`, `view` back; backward builds
the column gradient and folds it back with `F.fold`. Variant `conv2d`: the same standardised weight
through `F.conv2d` (cuDNN implicit GEMM; no column tensor).
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer, adamw, bf16 = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer", "adamw", "bf16"))


class StdConv2d(nn.Conv2d):
    """Weight-standardised convolution (zero mean, unit variance per output filter)."""

    use_unfold = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) * torch.rsqrt(w.var(dim=(1, 2, 3), keepdim=True, unbiased=False) + 1e-6)
        if not self.use_unfold:
            return F.conv2d(x, w, None, self.stride, self.padding)
        b, _, h, wd = x.shape
        kh, kw = self.kernel_size
        (s, _), (p, _) = self.stride, self.padding
        ho, wo = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
        cols = F.unfold(x, (kh, kw), padding=p, stride=s)  # (B, C_in * kh * kw, ho * wo)
        return (w.view(self.out_channels, -1) @ cols).view(b, self.out_channels, ho, wo)


class PreActBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.GroupNorm(min(32, cin // 2), cin), nn.GroupNorm(min(32, cout // 2), cout)
        self.c1 = StdConv2d(cin, cout, 3, stride, 1, bias=False)
        self.c2 = StdConv2d(cout, cout, 3, 1, 1, bias=False)
        self.skip = StdConv2d(cin, cout, 1, stride, 0, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.n1(x))
        sc = self.skip(h) if self.skip is not None else x
        return sc + self.c2(F.relu(self.n2(self.c1(h))))


def main() -> None:
    args = options(__doc__, ("conv2d",)).parse_args()
    torch.manual_seed(0)
    StdConv2d.use_unfold = args.variant != "conv2d"
    # GPU: 64 images of 128 x 128, 64/128/256 channels; CPU check: 2 images of 16 x 16, 8/16/32 channels
    batch, side, (w1, w2, w3), classes = (64, 128, (64, 128, 256), 100) if CUDA else (2, 16, (8, 16, 32), 10)
    model = nn.Sequential(
        StdConv2d(3, w1, 3, 2, 1, bias=False),
        PreActBlock(w1, w1, 1), PreActBlock(w1, w1, 1), PreActBlock(w1, w2, 2), PreActBlock(w2, w2, 1),
        PreActBlock(w2, w3, 2), PreActBlock(w3, w3, 1),
        nn.GroupNorm(32 if CUDA else 16, w3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w3, classes),
    ).to(DEVICE)
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    data = [(torch.randn(batch, 3, side, side, device=DEVICE, generator=g),
             torch.randint(0, classes, (batch,), device=DEVICE, generator=g)) for _ in range(2)]

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        x, y = data[i % 2]
        with bf16():
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"unfold_conv variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
