"""Multi-task dense prediction (segmentation, depth, surface normals) on a shared CNN encoder, one backward per task loss.

Baseline: a ResNet-style encoder (stem + three stages of residual 3x3 conv / BatchNorm / ReLU blocks,
64/128/256 channels, 1/8 resolution) feeds three small conv heads; bf16 autocast, channels_last,
fused AdamW. The training step calls `loss.backward(retain_graph=True)` once per task loss (the
usual way a multi-task loop is first written, e.g. to log per-task gradients), so autograd walks the
shared encoder's backward three times. Variant `sum_losses`: one `(seg + depth + normal).backward()`
(the same gradients, summed once by autograd).
"""

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
    """Basic residual block: two 3x3 convs, a strided 1x1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = conv_bn(cin, cout, stride)
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(self.a(x)) + self.skip(x))


class MultiTask(nn.Module):
    def __init__(self, widths: tuple[int, int, int], classes: int) -> None:
        super().__init__()
        w1, w2, w3 = widths
        self.stem = conv_bn(3, w1, 2)
        self.encoder = nn.Sequential(Block(w1, w1, 1), Block(w1, w1, 1), Block(w1, w2, 2), Block(w2, w2, 1),
                                     Block(w2, w3, 2), Block(w3, w3, 1))

        def head(out: int) -> nn.Sequential:
            return nn.Sequential(conv_bn(w3, w3 // 2), nn.Conv2d(w3 // 2, out, 1))

        self.seg, self.depth, self.normal = head(classes), head(1), head(3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.encoder(self.stem(x))
        return self.seg(f), self.depth(f), self.normal(f)


def main() -> None:
    args = options(__doc__, ("sum_losses",)).parse_args()
    torch.manual_seed(0)
    # GPU: 32 images of 256 x 256, features at 32 x 32; CPU check: 2 images of 32 x 32
    batch, side, widths, classes = (32, 256, (64, 128, 256), 19) if CUDA else (2, 32, (8, 16, 32), 5)
    fs = side // 8
    fmt = torch.channels_last if CUDA else torch.contiguous_format
    model = MultiTask(widths, classes).to(DEVICE, memory_format=fmt)
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    data = []
    for _ in range(2):
        x = torch.randn(batch, 3, side, side, device=DEVICE, generator=g).contiguous(memory_format=fmt)
        seg = torch.randint(0, classes, (batch, fs, fs), device=DEVICE, generator=g)
        depth = torch.rand(batch, 1, fs, fs, device=DEVICE, generator=g) * 10
        normal = F.normalize(torch.randn(batch, 3, fs, fs, device=DEVICE, generator=g), dim=1)
        data.append((x, seg, depth, normal))

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        x, seg, depth, normal = data[i % 2]
        opt.zero_grad(set_to_none=True)
        with bf16():
            s, d, n = model(x)
        losses = [F.cross_entropy(s.float(), seg), F.l1_loss(d.float(), depth),
                  (1 - F.cosine_similarity(n.float(), normal, dim=1)).mean()]
        if args.variant == "sum_losses":
            loss = losses[0] + losses[1] + losses[2]
            loss.backward()
        else:
            for k, part in enumerate(losses):  # one backward per task: the encoder's backward runs 3 times
                part.backward(retain_graph=k < len(losses) - 1)
            loss = (losses[0] + losses[1] + losses[2]).detach()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"multitask_backward variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
