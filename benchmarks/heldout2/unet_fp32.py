"""A small U-Net (3x3 conv + BatchNorm + ReLU, 4 levels, 32 to 256 channels) trained for
segmentation in fp32 with NCHW tensors.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/unet_fp32.py
Variants: --variant channels_last (fp32, model and input in channels_last), --variant bf16 (bf16
autocast, NCHW), --variant bf16_cl (bf16 autocast and channels_last). On the GPU: 256 x 256 images,
batch 16, 8 classes, SGD with momentum; cuDNN's defaults (TF32 convolutions on) are left as they are.
Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, base: int, classes: int) -> None:
        super().__init__()
        w = [base, 2 * base, 4 * base, 8 * base]
        self.inc = double_conv(3, w[0])
        self.downs = nn.ModuleList([double_conv(w[i], w[i + 1]) for i in range(3)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2) for i in reversed(range(3))])
        self.dec = nn.ModuleList([double_conv(2 * w[i], w[i]) for i in reversed(range(3))])
        self.out = nn.Conv2d(w[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for d in self.downs:
            skips.append(d(F.max_pool2d(skips[-1], 2)))
        h = skips.pop()
        for up, dec in zip(self.ups, self.dec, strict=True):
            h = dec(torch.cat([up(h), skips.pop()], dim=1))
        return self.out(h)


def main() -> None:
    args = options(__doc__, ("channels_last", "bf16", "bf16_cl")).parse_args()
    size, batch, base = (256, 16, 32) if CUDA else (32, 2, 4)
    classes = 8
    torch.manual_seed(0)
    model = UNet(base, classes).to(DEVICE)
    x = torch.randn(batch, 3, size, size, device=DEVICE)
    y = torch.randint(0, classes, (batch, size, size), device=DEVICE)
    if args.variant in ("channels_last", "bf16_cl"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    amp = args.variant in ("bf16", "bf16_cl")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    timer = StepTimer()
    loss = torch.zeros(())
    for _ in range(args.steps):
        timer.tick()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"unet_fp32 variant={args.variant or 'baseline'} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
