"""A MobileNetV2-style classifier (inverted residual blocks: 1x1 expand, 3x3 depthwise, 1x1 project,
BatchNorm, ReLU6) trained under bf16 autocast in the default NCHW memory format.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/depthwise_nchw.py
Variant: --variant channels_last (model and input batch in `torch.channels_last`). Same weights and
images. On the GPU: the MobileNetV2 layer table (width 1.0, 17 blocks, 1280-channel head), 224 x
224 images, batch 192, 1000 classes, SGD momentum 0.9, cudnn.benchmark left at its default. Each
step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn

# (expansion, out channels, repeats, first stride): MobileNetV2, Sandler et al. 2018, table 2
TABLE = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True) -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ ReLU6)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """1x1 expand, 3x3 depthwise, 1x1 linear projection; residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        layers = [conv_bn(cin, mid, 1, 1)] if expand != 1 else []
        layers += [conv_bn(mid, mid, 3, stride, groups=mid), conv_bn(mid, cout, 1, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2(classes: int) -> nn.Sequential:
    """Stem, the inverted-residual table, a 1x1 conv to 1280, global pool and a linear classifier."""
    layers: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
    cin = 32
    for t, c, n, s in TABLE:
        for j in range(n):
            layers.append(InvertedResidual(cin, c, s if j == 0 else 1, t))
            cin = c
    layers += [conv_bn(cin, 1280, 1, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes)]
    return nn.Sequential(*layers)


def main() -> None:
    args = options(__doc__, ("channels_last",)).parse_args()
    batch, size, classes = (192, 224, 1000) if CUDA else (4, 32, 10)
    fmt = torch.channels_last if args.variant == "channels_last" else torch.contiguous_format
    torch.manual_seed(0)
    model = mobilenet_v2(classes).to(DEVICE).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(batch, 3, size, size, device=DEVICE).contiguous(memory_format=fmt)
    labels = torch.randint(0, classes, (batch,), device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(model(images).float(), labels)

    train("depthwise_nchw", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
