"""ECG arrhythmia classifier (1-D ResNet, 12 leads x 10 s at 500 Hz) trained with a per-parameter Python-loop AdamW.

Baseline: AdamW written as a loop over the parameter tensors, the way older training repos (and
transformers' deprecated `AdamW`) wrote it: about seven small kernels per tensor, 149 tensors, issued
one after another from Python every step. Variant `fused_adamw`: `torch.optim.AdamW(fused=True)` with
the same hyper-parameters and the same update formula (on the CPU check: the for-loop
implementation, `foreach=False`).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, bf16, options, train
from torch import nn

LEADS, SAMPLES, WIDTH, BLOCKS, BATCH, CLASSES, BANK = (12, 5000, 64, 24, 64, 5, 4) if CUDA else (12, 256, 8, 3, 4, 5, 2)
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(c, c, 7, padding=3, bias=False), nn.BatchNorm1d(c)
        self.c2, self.b2 = nn.Conv1d(c, c, 7, padding=3, bias=False), nn.BatchNorm1d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class ECGNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(LEADS, WIDTH, 15, stride=4, padding=7, bias=False), nn.BatchNorm1d(WIDTH), nn.ReLU())
        self.blocks = nn.Sequential(*[Block(WIDTH) for _ in range(BLOCKS)])
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(-1))


class LoopAdamW:
    """AdamW as a Python loop over the tensors (decoupled weight decay, bias-corrected moments:
    the formula of torch's single-tensor AdamW)."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = BETAS
        step_size = LR / (1 - b1 ** self.t)
        bc2_sqrt = math.sqrt(1 - b2 ** self.t)
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            p.mul_(1 - LR * WD)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(EPS)
            p.addcdiv_(m, denom, value=-step_size)


def main() -> None:
    args = options(__doc__, ("fused_adamw",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        net = ECGNet()
    params = list(net.parameters())
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    signals = torch.randn(BANK, BATCH, LEADS, SAMPLES, generator=gen, device=DEVICE)
    labels = torch.randint(0, CLASSES, (BANK, BATCH), generator=gen, device=DEVICE)
    if args.variant == "fused_adamw":
        opt: object = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD,
                                        **({"fused": True} if CUDA else {"foreach": False}))
    else:
        opt = LoopAdamW(params)

    def loss_of(i: int) -> torch.Tensor:
        with bf16():
            return F.cross_entropy(net(signals[i % BANK]).float(), labels[i % BANK])

    train("ecg_resnet_loop_adamw", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
