"""A deep ensemble of 64 small MLPs trained together on the same batch, each member an
`nn.Sequential` in an `nn.ModuleList` called in a Python loop.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/ensemble_loop.py
Variants: --variant bmm (the members' weights stacked into (64, in, out) parameters, each layer one
`torch.baddbmm`, fp32), --variant bmm_bf16 (that under bf16 autocast). Same initial weights in every
variant. On the GPU: 64 members of 128 -> 256 -> 256 -> 1 with ReLU, batch 2048, fp32, MSE loss,
AdamW (default foreach). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


class Stacked(nn.Module):
    """The ensemble as stacked weights: one baddbmm per layer for all members."""

    def __init__(self, members: nn.ModuleList) -> None:
        super().__init__()
        lin = [[m[j] for m in members] for j in (0, 2, 4)]
        self.w = nn.ParameterList([nn.Parameter(torch.stack([lay.weight.detach().t() for lay in ls])) for ls in lin])
        self.b = nn.ParameterList([nn.Parameter(torch.stack([lay.bias.detach()[None] for lay in ls])) for ls in lin])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.expand(self.w[0].shape[0], -1, -1)
        for j in range(3):
            h = torch.baddbmm(self.b[j], h, self.w[j])
            if j < 2:
                h = F.relu(h)
        return h.squeeze(-1)


def main() -> None:
    args = options(__doc__, ("bmm", "bmm_bf16")).parse_args()
    members_n, d_in, hidden, batch = (64, 128, 256, 2048) if CUDA else (4, 8, 16, 32)
    torch.manual_seed(0)
    members = nn.ModuleList(
        nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) for _ in range(members_n)
    )
    model: nn.Module = members if args.variant is None else Stacked(members)
    model = model.to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, d_in, device=DEVICE)
    target = torch.randn(batch, device=DEVICE)
    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA and args.variant == "bmm_bf16"):
            pred = torch.stack([m(x).squeeze(-1) for m in members]) if args.variant is None else model(x)
            return F.mse_loss(pred.float(), target.expand_as(pred))

    train("ensemble_loop", args.variant, args.steps, opt, loss_of)

if __name__ == "__main__":
    main()
