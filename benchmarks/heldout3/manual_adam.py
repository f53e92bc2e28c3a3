"""A residual MLP trained with a hand-written AdamW (a Python loop over the parameters, a few tensor
ops per parameter, as research code often has it), the update of `torch.optim.AdamW`.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/manual_adam.py
Variants: --variant foreach (`torch.optim.AdamW(foreach=True)`), --variant fused
(`torch.optim.AdamW(fused=True)`). Same hyper-parameters and initial weights. On the GPU: 24 blocks
of LayerNorm + Linear(1024, 1024) + GELU + Linear(1024, 1024) (96 tensors, 50M weights), 4096
tokens, bf16 autocast, fp32 weights. Each step ends with tracekit.step().
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn

LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01


class HandAdamW:
    """AdamW as a loop over parameters: decoupled decay, moment updates, bias-corrected step."""

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
        step_size = LR / (1 - b1**self.t)
        bc2_sqrt = math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            p.mul_(1 - LR * WD)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(EPS)
            p.addcdiv_(m, denom, value=-step_size)


class Block(nn.Module):
    """x + W2 gelu(W1 layernorm(x))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.n, self.a, self.b = nn.LayerNorm(dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(F.gelu(self.a(self.n(x))))


def main() -> None:
    args = options(__doc__, ("foreach", "fused")).parse_args()
    dim, blocks, tokens = (1024, 24, 4096) if CUDA else (32, 3, 64)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(DEVICE)
    params = list(model.parameters())
    if args.variant is None:
        opt: HandAdamW | torch.optim.AdamW = HandAdamW(params)
    else:
        kind = {"foreach": True} if args.variant == "foreach" or not CUDA else {"fused": True}
        opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **kind)
    x = torch.randn(tokens, dim, device=DEVICE)
    target = torch.randn(tokens, dim, device=DEVICE)
    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.mse_loss(model(x).float(), target)

    train("manual_adam", args.variant, args.steps, opt, loss_of)

if __name__ == "__main__":
    main()
