"""Model-predictive control with a learned dynamics ensemble: a CEM planner's rollouts as thousands of tiny kernel launches.

The planning step of a PETS/MBPO-style model-based RL agent (a robot arm: 24-d state, 6-d action):
the cross-entropy method samples 512 action sequences of horizon 20, rolls each through an
ensemble of 5 learned dynamics MLPs (3 hidden layers of 200, SiLU, predicting the state change),
scores them with a reward, refits the action distribution to the 50 best, and repeats 4 times. Every
horizon step is ~25 small kernels on tensors of a few hundred KB, so the GPU finishes each kernel
long before Python has launched the next one: the step's time is the host's kernel-launch time.

Variants:
- baseline: the planner in eager PyTorch (a Python loop over CEM iterations and horizon steps).
- cuda_graph: the whole planning step (4 CEM iterations x 20 horizon steps, sampling included,
  with the noise drawn from the default CUDA generator, which graphs support) captured once with `torch.cuda.graph` after a
  warm-up on a side stream, then replayed per control step with the new start state copied into
  the graph's static input.

Sources: the "CUDA Graphs" section of the CUDA semantics notes and the `torch.cuda.graph` /
`torch.cuda.CUDAGraph` docstrings in the installed torch 2.13 (static inputs, warm-up on a side
stream, replay); the PETS paper (Chua et al., 2018), cited from memory.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Ensemble(nn.Module):
    """E independent MLPs evaluated together with batched matmuls (weights (E, in, out))."""

    def __init__(self, e: int, sizes: list[int]) -> None:
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(e, i, o) / i**0.5) for i, o in itertools.pairwise(sizes))
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(e, 1, o)) for o in sizes[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (E, N, in)
        for i, (w, b) in enumerate(zip(self.w, self.b, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.w) - 1:
                x = F.silu(x)
        return x


class Planner:
    def __init__(self, model: Ensemble, e: int, sdim: int, adim: int, pop: int, horizon: int, iters: int, elite: int) -> None:
        self.model, self.e, self.sdim, self.adim = model, e, sdim, adim
        self.pop, self.horizon, self.iters, self.elite = pop, horizon, iters, elite
        self.goal = torch.linspace(-1, 1, sdim, device=DEVICE)

    def plan(self, state: torch.Tensor) -> torch.Tensor:
        mean = torch.zeros(self.horizon, self.adim, device=DEVICE)
        std = torch.ones(self.horizon, self.adim, device=DEVICE)
        for _ in range(self.iters):
            noise = torch.randn(self.pop, self.horizon, self.adim, device=DEVICE)  # the default generator: graph-safe
            actions = (mean + std * noise).clamp(-1, 1)  # (pop, H, adim)
            s = state.expand(self.e, self.pop, self.sdim)
            ret = torch.zeros(self.pop, device=DEVICE)
            for t in range(self.horizon):
                a = actions[:, t].expand(self.e, self.pop, self.adim)
                s = s + self.model(torch.cat([s, a], dim=-1))  # predicted state change
                dist = (s - self.goal).pow(2).sum(-1).mean(0)  # ensemble-mean cost
                ret = ret - dist - 0.01 * actions[:, t].pow(2).sum(-1)
            idx = ret.topk(self.elite).indices
            best = actions[idx]
            mean, std = best.mean(0), best.std(0) + 1e-3
        return mean[0]  # the first action of the refitted plan


def main() -> None:
    args = options(__doc__, ("cuda_graph",)).parse_args()
    torch.manual_seed(0)
    e, sdim, adim, hidden, pop, horizon, iters, elite = (5, 24, 6, 200, 512, 20, 4, 50) if CUDA else (2, 6, 2, 16, 32, 4, 2, 5)
    with torch.device(DEVICE):
        model = Ensemble(e, [sdim + adim, hidden, hidden, hidden, sdim])
    planner = Planner(model, e, sdim, adim, pop, horizon, iters, elite)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    starts = torch.randn(4, sdim, device=DEVICE, generator=gen) * 0.5
    use_graph = args.variant == "cuda_graph" and CUDA  # without CUDA the variant runs eagerly (the CPU check)
    torch.manual_seed(2)
    if use_graph:
        static_state = starts[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):  # warm-up (cuBLAS handles, allocator) before capture
                planner.plan(static_state)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            static_action = planner.plan(static_state)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            if use_graph:
                static_state.copy_(starts[i % 4])
                graph.replay()
                action = static_action
            else:
                action = planner.plan(starts[i % 4])
            total += action.abs().sum()
            timer.end()
    timer.report(f"mpc_dynamics_rollout variant={args.variant or 'baseline'} mean |action| {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
