"""A narrow, deep MLP (many small parameter tensors) trained by SGD with momentum and one parameter
group per tensor (weight decay chosen per tensor), foreach off.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/sgd_groups.py
Variants: --variant two_groups (the usual decay / no-decay pair of groups, foreach on), --variant fused
(those two groups with SGD(fused=True); on the CPU it stays foreach). On the GPU: 96 blocks of
LayerNorm + Linear(256, 256) (384 tensors), batch 512. Each step ends with tracekit.step().
"""

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.fc(self.norm(x)))


def main() -> None:
    args = options(__doc__, ("two_groups", "fused")).parse_args()
    dim, blocks, batch = (256, 96, 512) if CUDA else (16, 6, 8)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(DEVICE)
    named = list(model.named_parameters())
    decay = [p for n, p in named if n.endswith("fc.weight")]
    other = [p for n, p in named if not n.endswith("fc.weight")]
    if args.variant is None:
        groups = [{"params": [p], "weight_decay": 1e-4 if n.endswith("fc.weight") else 0.0} for n, p in named]
        opt = torch.optim.SGD(groups, lr=1e-3, momentum=0.9, foreach=False)
    else:
        two = [{"params": decay, "weight_decay": 1e-4}, {"params": other, "weight_decay": 0.0}]
        fused = args.variant == "fused" and CUDA
        opt = torch.optim.SGD(two, lr=1e-3, momentum=0.9, **({"fused": True} if fused else {"foreach": True}))
    x = torch.randn(batch, dim, device=DEVICE)
    timer = StepTimer()
    loss = torch.zeros(())
    for _ in range(args.steps):
        timer.tick()
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"sgd_groups variant={args.variant or 'baseline'} tensors {len(named)} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
