"""DQN-style updates that sample each minibatch from a GPU-resident replay buffer with `torch.randperm(N)[:B]` on the CPU.

Replay buffer of 1,048,576 transitions on the GPU (128-float observations and next observations,
actions of 18, rewards, done flags), Q-network MLP 128 -> 1024 -> 1024 -> 18 and a frozen target copy,
Huber loss on the one-step TD target, bf16 autocast, fused AdamW; 4 updates of batch 4,096 per step.
Baseline: `idx = torch.randperm(N)[:4096].to("cuda")`: a full permutation of the 1M indices on the
training thread (a shuffle of an 8 MB array) and a blocking upload, per update. Variant
`gpu_randperm`: `torch.randperm(N, device="cuda", generator=...)[:4096]` (a sort of random keys on
the GPU; still a uniform sample without replacement). On the CPU check both draw from equally
seeded CPU generators and give the same loss; on the GPU the variant draws other (equally
distributed) indices, so its losses differ from the baseline's by sampling, not by rounding.
"""

import copy
import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("gpu_randperm",)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    n, obs_dim, hidden, actions, batch, updates = (1 << 20, 128, 1024, 18, 4096, 4) if cuda else (5000, 8, 32, 4, 64, 2)
    torch.manual_seed(0)
    g = torch.Generator(device=dev).manual_seed(1)
    obs, nxt = (torch.randn(n, obs_dim, device=dev, generator=g) for _ in range(2))
    act = torch.randint(0, actions, (n,), device=dev, generator=g)
    rew = torch.randn(n, device=dev, generator=g)
    done = (torch.rand(n, device=dev, generator=g) < 0.01).float()
    qnet = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, actions)).to(dev)
    target = copy.deepcopy(qnet).requires_grad_(False)
    opt = C["adamw"](list(qnet.parameters()))
    sampler = torch.Generator(device=dev if args.variant == "gpu_randperm" else "cpu").manual_seed(2)

    def sample() -> torch.Tensor:
        if args.variant == "gpu_randperm":
            return torch.randperm(n, generator=sampler, device=dev)[:batch]
        return torch.randperm(n, generator=sampler)[:batch].to(dev)

    timer, total = C["StepTimer"](), torch.zeros((), dtype=torch.float64, device=dev)
    for _ in range(args.steps):
        timer.tick()
        for _ in range(updates):
            idx = sample()
            with C["bf16"]():
                q = qnet(obs[idx]).float().gather(1, act[idx, None]).squeeze(1)
                with torch.no_grad():
                    y = rew[idx] + 0.99 * (1.0 - done[idx]) * target(nxt[idx]).float().amax(1)
            loss = F.smooth_l1_loss(q, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
        timer.end()
    timer.report(f"replay_sample variant={args.variant or 'baseline'} mean loss {total.item() / (args.steps * updates):.6f}")


if __name__ == "__main__":
    main()
