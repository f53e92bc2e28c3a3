"""Policy rollout under `torch.compile` (default mode): an actor MLP and a batched GPU environment stepped one time step per call.

Every step rolls 4,096 point-mass environments forward 128 time steps; each time step is one call of
a compiled function (the policy's three Linear + tanh layers, the action, the physics update and the
reward), whose state feeds the next call. Variant `reduce_overhead`: the same function compiled
with `mode="reduce-overhead"` (CUDA graphs).
"""

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("reduce_overhead",)
ENVS, HORIZON, HIDDEN = (4096, 128, 256) if CUDA else (64, 8, 32)
DOF = 16


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(2 * DOF, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                           nn.Linear(HIDDEN, DOF), nn.Tanh()).to(DEVICE).eval()
    target = torch.randn(DOF, device=DEVICE)

    def env_step(pos: torch.Tensor, vel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        action = policy(torch.cat([pos - target, vel], dim=-1))
        vel = 0.98 * vel + 0.05 * action
        pos = pos + 0.05 * vel
        reward = -((pos - target) ** 2).sum(-1) - 0.01 * (action**2).sum(-1)
        return pos, vel, reward

    mode = "reduce-overhead" if args.variant == "reduce_overhead" else "default"
    step_fn = torch.compile(env_step, mode=mode)
    start = torch.randn(ENVS, DOF, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            pos, vel = start.clone(), torch.zeros_like(start)
            ret = torch.zeros(ENVS, device=DEVICE)
            for _t in range(HORIZON):
                torch.compiler.cudagraph_mark_step_begin()
                pos, vel, reward = step_fn(pos, vel)
                # the state is the next call's input: own copies, never a CUDA-graph output buffer
                pos, vel = pos.clone(), vel.clone()
                ret += reward
            total += ret.mean()
            timer.end()
    timer.report(f"compiled_rollout variant={args.variant or 'baseline'} mean return {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
