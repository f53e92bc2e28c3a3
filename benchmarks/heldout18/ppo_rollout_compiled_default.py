"""Experience collection of a PPO agent in a batched, GPU-resident "reacher" environment (1,024 point
robots steering to goals): each environment step calls one `torch.compile`d function that runs the
actor-critic MLP, samples an action (Gumbel-max over 9 moves), moves the robots and computes the
reward; 128 environment steps per rollout, one rollout per step of this script.

Baseline: `torch.compile(env_step)` with the default mode: inductor fuses the pointwise work, but
each of the 128 small calls still goes through the Python wrapper that launches its kernels one by
one (guards, ~10 launches), while each kernel runs for a few microseconds, so the GPU mostly waits.
Variant `reduce_overhead`: `torch.compile(env_step, mode="reduce-overhead")`: the same graph
captured as a CUDA graph and replayed per call. Same actions, rewards and values (same kernels and
the same pre-drawn noise)."""

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

ENVS, HORIZON, HIDDEN = (1024, 128, 256) if CUDA else (8, 8, 32)
OBS, MOVES = 8, 9


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh())
        self.pi, self.v = nn.Linear(HIDDEN, MOVES), nn.Linear(HIDDEN, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def main() -> None:
    args = options(__doc__ or "", ("reduce_overhead",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        net = ActorCritic().eval()
        angles = torch.arange(8) * (torch.pi / 4)
        moves = torch.cat([torch.zeros(1, 2), torch.stack([angles.cos(), angles.sin()], 1)]) * 0.05
        gen = torch.Generator(DEVICE).manual_seed(1)
        pos = torch.rand(ENVS, 2, generator=gen) * 2 - 1
        vel = torch.zeros(ENVS, 2)
        goal = torch.rand(ENVS, 2, generator=gen) * 2 - 1
        rewards, values = torch.zeros(HORIZON, ENVS), torch.zeros(HORIZON, ENVS)
        actions, logps = torch.zeros(HORIZON, ENVS, dtype=torch.int64), torch.zeros(HORIZON, ENVS)

    def env_step(pos: torch.Tensor, vel: torch.Tensor, goal: torch.Tensor, noise: torch.Tensor):
        obs = torch.cat([pos, vel, goal - pos, (goal - pos).norm(dim=-1, keepdim=True), pos.norm(dim=-1, keepdim=True)], -1)
        logits, value = net(obs)
        logp_all = torch.log_softmax(logits, -1)
        action = torch.argmax(logp_all - torch.log(-torch.log(noise)), -1)  # Gumbel-max sample
        logp = logp_all.gather(-1, action[:, None]).squeeze(-1)
        vel = 0.8 * vel + moves[action]
        pos = (pos + vel).clamp(-1.5, 1.5)
        dist = (goal - pos).norm(dim=-1)
        reward = -dist + (dist < 0.05).float()
        return pos, vel, action, logp, value, reward

    mode = "reduce-overhead" if args.variant == "reduce_overhead" else None
    step_fn = torch.compile(env_step, mode=mode)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            for t in range(HORIZON):
                noise = torch.rand(ENVS, MOVES, generator=gen, device=DEVICE).clamp_(1e-6, 1 - 1e-6)
                new_pos, new_vel, a, lp, v, r = step_fn(pos, vel, goal, noise)
                pos.copy_(new_pos)  # the outputs of a CUDA-graph replay are reused by the next one
                vel.copy_(new_vel)
                actions[t].copy_(a)
                logps[t].copy_(lp)
                values[t].copy_(v)
                rewards[t].copy_(r)
                del new_pos, new_vel, a, lp, v, r
            total += rewards.sum(0).mean() + 1e-3 * values.mean() + 1e-3 * logps.mean()
            timer.end()
    timer.report(f"ppo_rollout_compiled_default variant={args.variant or 'baseline'} return checksum "
                 f"{total.item() / args.steps:.5f} last actions {actions[-1, :4].tolist()}")


if __name__ == "__main__":
    main()
