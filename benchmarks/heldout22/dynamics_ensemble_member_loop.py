"""Model-based RL rollouts that run the dynamics ensemble one member at a time (batching).

Workload: MBPO-style synthetic rollouts: 1,024 start states drawn from a replay pool each step (24-dim
states, 8-dim actions), rolled 25 steps ahead through a learned dynamics model, a deep ensemble of 8
MLPs (32 -> 4 x 256 SiLU -> 50: mean and log-variance of the state change and the reward), with a
policy MLP choosing the actions; at each rollout step every state takes the mean prediction of one
randomly chosen member. float32, inference.

Cause (baseline): the ensemble is an `nn.ModuleList` of ordinary MLPs evaluated in a Python loop,
`torch.stack([m(x) for m in members])`: 8 separate forwards of 9 small kernels each per rollout step
(~90 launches with the policy and the bookkeeping), each GEMM only 1,024 x 256; the step is bound
by launching kernels one by one.

Fix (`--variant stacked_ensemble`): stack the members' weights once into (8, in, out) tensors and
evaluate all members together with one `torch.baddbmm` per layer (the "ensemble linear" layer of
MBPO/PETS implementations; `torch.func.stack_module_state` + `vmap` is the generic form), ~25 launches
per rollout step. The same weights and inputs; batched GEMMs may round differently from the
per-member ones in the last float32 bits, and the rollouts feed their outputs back, so the checksums
should agree to several digits rather than exactly.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("stacked_ensemble",)
MEMBERS, HIDDEN, ROLLOUTS, HORIZON, POOL = (8, 256, 1024, 25, 100_000) if CUDA else (3, 16, 8, 4, 64)
STATE, ACTION = 24, 8
OUT = 2 * (STATE + 1)  # mean and log-variance of (state change, reward)


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class StackedEnsemble:
    """All members' Linear layers stacked once into (E, in, out) weights and (E, 1, out) biases."""

    def __init__(self, members: nn.ModuleList) -> None:
        linears = [[m[j] for m in members] for j in range(0, len(members[0]), 2)]
        self.weights = [torch.stack([lin.weight.t() for lin in layer]).contiguous() for layer in linears]
        self.biases = [torch.stack([lin.bias for lin in layer]).unsqueeze(1) for layer in linears]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = x.expand(len(self.weights[0]), -1, -1)
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if k < len(self.weights) - 1:
                h = F.silu(h)
        return h


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        members = nn.ModuleList(mlp([STATE + ACTION, *[HIDDEN] * 4, OUT]) for _ in range(MEMBERS)).eval()
        policy = mlp([STATE, HIDDEN, HIDDEN, ACTION]).eval()
    gen = torch.Generator(DEVICE).manual_seed(1)
    pool = torch.randn(POOL, STATE, device=DEVICE, generator=gen)
    mu = torch.randn(STATE + ACTION, device=DEVICE, generator=gen) * 0.1
    sigma = torch.rand(STATE + ACTION, device=DEVICE, generator=gen) + 0.5
    rows = torch.arange(ROLLOUTS, device=DEVICE)
    with torch.no_grad():
        ensemble = StackedEnsemble(members) if args.variant == "stacked_ensemble" else None

        def predict(x: torch.Tensor) -> torch.Tensor:
            if ensemble is not None:
                return ensemble(x)
            return torch.stack([m(x) for m in members])

        total = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            s = pool[torch.randint(0, POOL, (ROLLOUTS,), device=DEVICE, generator=gen)]
            pick = torch.randint(0, MEMBERS, (HORIZON, ROLLOUTS), device=DEVICE, generator=gen)
            reward = torch.zeros(ROLLOUTS, device=DEVICE)
            for t in range(HORIZON):
                a = torch.tanh(policy(s))
                out = predict((torch.cat([s, a], dim=1) - mu) / sigma)  # (members, rollouts, OUT)
                mean = out[pick[t], rows, : STATE + 1]
                s = s + 0.1 * torch.tanh(mean[:, :STATE])
                reward += mean[:, STATE]
            total += reward.sum() + s.sum()
            timer.end()
    timer.report(f"dynamics_ensemble_member_loop variant={args.variant or 'baseline'} "
                 f"rollout checksum {total.item():.5f}")


if __name__ == "__main__":
    main()
