"""A deep residual MLP trained with hand-written gradient-norm clipping and a weight EMA, both
written as Python loops over the 288 parameter tensors (the old-style `p.grad.norm().item()` sum).

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/clip_ema.py
Fixes: --fix foreach (clip_grad_norm_(foreach=True), whose clip coefficient stays on the GPU, and an
EMA by torch._foreach_lerp_), --fix foreach_fused (that, with AdamW(fused=True)). On the GPU: 48 blocks
of LayerNorm + two 1024x1024 Linears, batch 256, AdamW. Steps are marked by tracekit's
optimizer.step() hook; at the end it prints the mean step time measured without the profiler.
"""

import math

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

MAX_NORM, DECAY = 1.0, 0.999


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


def clip_loop(params: list[nn.Parameter]) -> None:
    """Clip to MAX_NORM in total: one norm and one .item() per tensor, then a scale per tensor."""
    total = 0.0
    for p in params:
        total += p.grad.norm(2).item() ** 2
    coef = MAX_NORM / (math.sqrt(total) + 1e-6)
    if coef < 1:
        for p in params:
            p.grad.mul_(coef)


def main() -> None:
    args = options(__doc__, ("foreach", "foreach_fused")).parse_args()
    dim, blocks, batch = (1024, 48, 256) if CUDA else (16, 4, 4)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(DEVICE)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    fused = {"fused": True} if args.fix == "foreach_fused" else {}
    opt = torch.optim.AdamW(params, lr=1e-4, **fused)
    x = torch.randn(batch, dim, device=DEVICE)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.fix is None:
            clip_loop(params)
        else:
            nn.utils.clip_grad_norm_(params, MAX_NORM, foreach=True)
        opt.step()
        with torch.no_grad():
            if args.fix is None:
                for e, p in zip(ema, params, strict=True):
                    e.mul_(DECAY).add_(p, alpha=1 - DECAY)
            else:
                torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - DECAY)
    timer.report(f"clip_ema fix={args.fix or 'none'} loss {loss.item():.4f} ema[0] {ema[0].sum().item():.5f}")


if __name__ == "__main__":
    main()
