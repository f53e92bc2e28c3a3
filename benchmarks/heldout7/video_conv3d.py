"""3D-ResNet video classifier (R3D-style, one basic block per stage) trained in float32 NCDHW.

Stem Conv3d(3 -> 64, kernel 3x7x7, stride 1x2x2) + BatchNorm3d + ReLU, then four stages of one
residual basic block (two 3x3x3 Conv3d + BatchNorm3d, ReLU; 64, 128, 256, 512 channels, stride 2 and
a 1x1x1 projection from the second stage on), global average pool, Linear(512, 400). Clips of 16
frames at 112 x 112, batch 16, SGD with momentum, `cudnn.benchmark = True` in every variant.
Baseline: float32 (cuDNN's default TF32 for convolutions), NCDHW. Variant `bf16_cl`: bf16 autocast
with the model and the clips in `torch.channels_last_3d`.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn


def conv_bn(cin: int, cout: int, kernel: tuple[int, int, int], stride: tuple[int, int, int]) -> nn.Sequential:
    pad = tuple(k // 2 for k in kernel)
    return nn.Sequential(nn.Conv3d(cin, cout, kernel, stride, pad, bias=False), nn.BatchNorm3d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = conv_bn(cin, cout, (3, 3, 3), (stride,) * 3)
        self.b = conv_bn(cout, cout, (3, 3, 3), (1, 1, 1))
        self.short = conv_bn(cin, cout, (1, 1, 1), (stride,) * 3) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(F.relu(self.a(x))) + self.short(x))


class R3D(nn.Module):
    def __init__(self, widths: tuple[int, ...], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, widths[0], (3, 7, 7), (1, 2, 2)), nn.ReLU())
        self.stages = nn.Sequential(*(BasicBlock(widths[max(i - 1, 0)], w, 1 if i == 0 else 2) for i, w in enumerate(widths)))
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.stages(self.stem(x)).mean((2, 3, 4)))


def main() -> None:
    args = options(__doc__, ("bf16_cl",)).parse_args()
    batch, frames, side, widths, classes = (16, 16, 112, (64, 128, 256, 512), 400) if CUDA else (4, 8, 32, (8, 16, 32, 64), 10)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = R3D(widths, classes)
        clips = torch.randn(4, batch, 3, frames, side, side)
        labels = torch.randint(0, classes, (4, batch))
    fmt = torch.channels_last_3d if args.variant == "bf16_cl" else torch.contiguous_format
    model = model.to(memory_format=fmt)  # type: ignore[call-overload]
    batches = [clips[i].contiguous(memory_format=fmt) for i in range(4)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        if args.variant == "bf16_cl":
            with bf16():
                out = model(batches[i % 4])
        else:
            out = model(batches[i % 4])
        loss = F.cross_entropy(out.float(), labels[i % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"video_conv3d variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
