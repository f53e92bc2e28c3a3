"""Dreamer-style imagination rollouts whose `torch.distributions` objects validate their arguments (the default).

Launch overhead / syncs. A world model's latent imagination for planning/evaluation, inference:
1,024 start states, 32 imagined steps per step. Each imagined step: the actor MLP (deter 512 +
stoch 32 -> 512 -> 512 -> mean and std of 6 actions, ELU) gives `Normal(mean, std)`, an action
`tanh(rsample())` and its `log_prob`; the RSSM prior (Linear + ELU on [stoch, action], `GRUCell`
512, Linear + ELU, Linear to mean and softplus std of 32 stochastic units) gives another
`Normal(...)` and `rsample()`; after the horizon a reward MLP scores every imagined state, float32.
`torch.distributions` validates by default (`Distribution._validate_args` is `__debug__`): each
`Normal(loc, scale)` checks `loc` (real) and `scale` (positive) and each `log_prob` checks its value
(real), each check a small kernel and a `bool()` of a CUDA tensor: 5 host syncs per imagined step
between ~40 small kernels.

Variant `no_validate`: `torch.distributions.Distribution.set_default_validate_args(False)` at
start-up (what `python -O` does); the same samples from the same generator.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.distributions import Normal

VARIANTS = ("no_validate",)
if CUDA:
    STARTS, HORIZON, DETER, STOCH, HIDDEN, ACTIONS = 1024, 32, 512, 32, 512, 6
else:
    STARTS, HORIZON, DETER, STOCH, HIDDEN, ACTIONS = 64, 4, 32, 8, 32, 3


class RSSMPrior(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(STOCH + ACTIONS, HIDDEN)
        self.cell = nn.GRUCell(HIDDEN, DETER)
        self.out = nn.Linear(DETER, HIDDEN)
        self.dist = nn.Linear(HIDDEN, 2 * STOCH)

    def forward(self, stoch: torch.Tensor, deter: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        deter = self.cell(F.elu(self.inp(torch.cat((stoch, action), -1))), deter)
        mean, std = self.dist(F.elu(self.out(deter))).chunk(2, -1)
        stoch = Normal(mean, F.softplus(std) + 0.1).rsample()
        return stoch, deter


class Actor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(DETER + STOCH, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, HIDDEN), nn.ELU(),
                                 nn.Linear(HIDDEN, 2 * ACTIONS))

    def forward(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = self.net(feat).chunk(2, -1)
        dist = Normal(5.0 * torch.tanh(mean / 5.0), F.softplus(std) + 1e-4)
        raw = dist.rsample()
        return torch.tanh(raw), dist.log_prob(raw).sum(-1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    if args.variant == "no_validate":
        torch.distributions.Distribution.set_default_validate_args(False)
    torch.manual_seed(0)
    prior, actor = RSSMPrior().to(DEVICE), Actor().to(DEVICE)
    reward = nn.Sequential(nn.Linear(DETER + STOCH, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, 1)).to(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    pool = 4
    deter0 = torch.randn(pool, STARTS, DETER, device=DEVICE, generator=gen) * 0.5
    stoch0 = torch.randn(pool, STARTS, STOCH, device=DEVICE, generator=gen)
    torch.manual_seed(2)  # rsample draws from the default generator: the same sequence in both variants
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            deter, stoch = deter0[i % pool], stoch0[i % pool]
            feats, logps = [], []
            for _ in range(HORIZON):
                feat = torch.cat((deter, stoch), -1)
                action, logp = actor(feat)
                stoch, deter = prior(stoch, deter, action)
                feats.append(feat)
                logps.append(logp)
            value = reward(torch.stack(feats)).mean() - 1e-3 * torch.stack(logps).mean()
            total += value
            timer.end()
    timer.report(f"dist_validate variant={args.variant or 'baseline'} mean imagined value {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
