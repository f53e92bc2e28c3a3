"""A ResNet-18 (torchvision, random weights) trained in fp32 NCHW, or in bf16 autocast + channels_last.

Run: tracekit profile --warmup 1 sample_traces/scripts/train_conv.py --steps 8            (fp32, NCHW)
     tracekit profile --warmup 1 sample_traces/scripts/train_conv.py --steps 8 --fast     (bf16 + channels_last)
     (--bf16 or --channels-last alone: one of the two changes)
The pair of the channels_last / conv-aware lower_precision rules: batch 64 of 3×224×224 images,
1000 classes, SGD with momentum. fp32 NCHW runs cuDNN's TF32 convolutions through nchwToNhwc /
nhwcToNchw layout transposes beside fp32 BatchNorm kernels; --fast converts the model and the input
to channels_last and autocasts the forward to bfloat16. Steps are marked by tracekit's
optimizer.step() hook. Without CUDA (or torchvision) it runs a tiny conv net on the CPU.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def tiny_net() -> nn.Module:
    """A two-block conv net for quick CPU runs of the script."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fast", action="store_true", help="bf16 autocast + channels_last (both below)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast only")
    p.add_argument("--channels-last", action="store_true", help="channels_last only (fp32)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    bf16, channels_last = args.fast or args.bf16, args.fast or args.channels_last
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    try:
        import torchvision
        model: nn.Module = torchvision.models.resnet18(weights=None, num_classes=1000) if cuda else tiny_net()
    except ImportError:
        model = tiny_net()
    batch, size, classes = (args.batch, 224, 1000) if cuda else (4, 32, 10)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=fmt)
    y = torch.arange(batch, device=device) % classes
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = f"{'bf16 autocast' if bf16 else 'fp32'} {'channels_last' if channels_last else 'NCHW'}"
    print(f"{kind}: loss {loss.item():.4f}; mean step time over steps 2..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
