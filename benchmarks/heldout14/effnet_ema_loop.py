"""EfficientNet-style classifier training whose weight EMA is a per-tensor loop over `state_dict()`.

Workload: fine-tuning an EfficientNet-B0-shaped image classifier (stem 3 -> 32 stride 2, 16 MBConv
blocks with depthwise 3x3 / 5x5 convolutions, squeeze-excitation and BatchNorm, 1x1 head to 1,280,
100 classes; 4.1M weights in 213 parameter tensors plus 147 BatchNorm buffers) on 128 x 128 crops,
64 images per step from a GPU-resident uint8 pool, label smoothing 0.1, bf16 autocast, channels_last,
fused AdamW. After every optimizer step an exponential moving average of the model (decay 0.9998) is
updated the way timm's `ModelEmaV2` and YOLO's `ModelEMA` do it: a Python loop over
`ema.state_dict().values()` and `model.state_dict().values()` that runs
`ema_v.copy_(decay * ema_v + (1 - decay) * model_v)` for each of the 360 tensors (four kernels a
tensor, about 1,440 launches a step, and two `state_dict()` walks of the module tree).

Variant `foreach_ema`: the same average with `torch._foreach_lerp_(ema_floats, model_floats,
1 - decay)` over the floating-point tensors and `torch._foreach_copy_` for the integer BatchNorm
counters, on tensor lists built once (as timm's `ModelEmaV3` does per update); the same values up to
the last bit of the lerp's rounding.

Variant `compiled` (extra, timed but not recorded): the baseline with the model wrapped in
`torch.compile` (default mode); the EMA loop, outside the model, is unchanged.
"""

import copy

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

# (expansion, output channels, repeats, stride, kernel) per stage, as in EfficientNet-B0
if CUDA:
    STAGES = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
              (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))
    IMG, BATCH, POOL, CLASSES, HEAD = 128, 64, 512, 100, 1280
else:
    STAGES = ((1, 8, 1, 1, 3), (4, 12, 2, 2, 3), (4, 16, 1, 2, 5))
    IMG, BATCH, POOL, CLASSES, HEAD = 32, 4, 16, 10, 64
DECAY = 0.9998


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, reduced, 1), nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    """Inverted residual: 1x1 expansion, depthwise kxk, squeeze-excitation, 1x1 projection."""

    def __init__(self, cin: int, cout: int, expansion: int, stride: int, k: int) -> None:
        super().__init__()
        mid = cin * expansion
        self.expand = conv_bn(cin, mid, 1) if expansion != 1 else nn.Identity()
        self.depthwise = conv_bn(mid, mid, k, stride, groups=mid)
        self.se = SqueezeExcite(mid, max(1, cin // 4))
        self.project = conv_bn(mid, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.project(self.se(self.depthwise(self.expand(x))))
        return x + h if self.residual else h


class EfficientNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, 32 if CUDA else 8, 3, 2)
        blocks: list[nn.Module] = []
        cin = 32 if CUDA else 8
        for expansion, cout, repeats, stride, k in STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, expansion, stride if i == 0 else 1, k))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = conv_bn(cin, HEAD, 1)
        self.classifier = nn.Linear(HEAD, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


@torch.no_grad()
def ema_update_loop(ema: nn.Module, model: nn.Module, decay: float) -> None:
    """timm ModelEmaV2 / YOLO ModelEMA: one update per state_dict entry."""
    for ema_v, model_v in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
        ema_v.copy_(decay * ema_v + (1.0 - decay) * model_v)


class ForeachEma:
    """The same average over tensor lists built once: one lerp for the floats, one copy for the counters."""

    def __init__(self, ema: nn.Module, model: nn.Module) -> None:
        pairs = list(zip(ema.state_dict().values(), model.state_dict().values(), strict=True))
        self.ema_f = [e for e, _ in pairs if e.is_floating_point()]
        self.model_f = [m for e, m in pairs if e.is_floating_point()]
        self.ema_i = [e for e, _ in pairs if not e.is_floating_point()]
        self.model_i = [m for e, m in pairs if not e.is_floating_point()]

    @torch.no_grad()
    def update(self, decay: float) -> None:
        torch._foreach_lerp_(self.ema_f, self.model_f, 1.0 - decay)
        torch._foreach_copy_(self.ema_i, self.model_i)


def main() -> None:
    args = options(__doc__, ("foreach_ema", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = EfficientNet()
    if CUDA:
        model = model.to(memory_format=torch.channels_last)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    foreach_ema = ForeachEma(ema, model) if args.variant == "foreach_ema" else None
    net = torch.compile(model) if args.variant == "compiled" else model
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, IMG, IMG), dtype=torch.uint8, device=DEVICE, generator=gen)
    pool_labels = torch.randint(0, CLASSES, (POOL,), device=DEVICE, generator=gen)
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        idx = torch.randint(0, POOL, (BATCH,), device=DEVICE, generator=gen)
        x = ((pool[idx].float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with bf16():
            loss = F.cross_entropy(net(x), pool_labels[idx], label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if foreach_ema is not None:
            foreach_ema.update(DECAY)
        else:
            ema_update_loop(ema, model, DECAY)
        total += loss.detach()
        timer.end()
    ema_sum = sum(float(p.double().sum()) for p in ema.parameters())
    timer.report(f"effnet_ema_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"ema weight sum {ema_sum:.4f}")


if __name__ == "__main__":
    main()
