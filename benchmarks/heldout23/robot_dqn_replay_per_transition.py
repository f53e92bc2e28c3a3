"""DQN for warehouse-robot navigation whose GPU replay buffer is filled one transition at a time.

1,024 point-mass robots driving to goals (8-dim observations, 5 discrete accelerations) simulated
together on the GPU; a Q-network (MLP 8 -> 256 -> 256 -> 5, float32, a target copy synced every 4
steps, Huber TD loss, fused AdamW) learns from a 1M-transition replay buffer held on the GPU. Each
step: act epsilon-greedily for all robots, step the simulation, store the 1,024 new transitions,
reset finished episodes, then 4 updates on 2,048 sampled transitions each. The store is the everyday
`for j in range(n_envs): buffer.add(obs[j], act[j], ...)`, written for a single environment and kept
when the environments were vectorised: five indexed copies per transition, ~5,100 one-element or
8-element copy kernels and their Python per step against ~2 ms of updates.

--variant batched_insert: the batch's slots `(ptr + arange(n)) % capacity` computed once and each
field stored with one indexed write (`buf[slots] = field`): five kernels; the same buffer contents.
"""

import copy

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn

args = options(__doc__, ("batched_insert",)).parse_args()
if CUDA:
    ENVS, CAP, BATCH, WIDTH = 1024, 1_048_576, 2048, 256
else:
    ENVS, CAP, BATCH, WIDTH = 16, 4096, 32, 32
OBS, ACTIONS, HORIZON, GAMMA, EPSILON, UPDATES = 8, 5, 200, 0.99, 0.1, 4

torch.manual_seed(0)
with torch.device(DEVICE):
    qnet = nn.Sequential(nn.Linear(OBS, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, ACTIONS))
    target = copy.deepcopy(qnet)
    accel = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    buf_obs, buf_next = torch.zeros(CAP, OBS), torch.zeros(CAP, OBS)
    buf_act, buf_rew, buf_done = torch.zeros(CAP, dtype=torch.long), torch.zeros(CAP), torch.zeros(CAP)
opt = adamw(list(qnet.parameters()))
gen = torch.Generator(DEVICE).manual_seed(23)
pos, goal = (torch.rand(2, ENVS, 2, device=DEVICE, generator=gen) * 2 - 1).unbind(0)
vel, clock = torch.zeros(ENVS, 2, device=DEVICE), torch.zeros(ENVS, device=DEVICE)


def observe() -> torch.Tensor:
    dist = (goal - pos).norm(dim=1, keepdim=True)
    return torch.cat([pos, vel, goal, dist, clock[:, None] / HORIZON], 1)


def store(ptr: int, obs: torch.Tensor, act: torch.Tensor, rew: torch.Tensor, nxt: torch.Tensor,
          done: torch.Tensor) -> None:
    if args.variant == "batched_insert":
        slots = (ptr + torch.arange(ENVS, device=DEVICE)) % CAP
        buf_obs[slots], buf_act[slots], buf_rew[slots], buf_next[slots], buf_done[slots] = obs, act, rew, nxt, done
        return
    for j in range(ENVS):  # buffer.add(...) per environment
        slot = (ptr + j) % CAP
        buf_obs[slot] = obs[j]
        buf_act[slot] = act[j]
        buf_rew[slot] = rew[j]
        buf_next[slot] = nxt[j]
        buf_done[slot] = done[j]


ptr = size = 0
total_loss = torch.zeros((), device=DEVICE, dtype=torch.float64)
total_rew = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    obs = observe()
    with torch.no_grad():
        greedy = qnet(obs).argmax(1)
    explore = torch.rand(ENVS, device=DEVICE, generator=gen) < EPSILON
    act = torch.where(explore, torch.randint(0, ACTIONS, (ENVS,), device=DEVICE, generator=gen), greedy)
    d_old = (goal - pos).norm(dim=1)
    vel = 0.9 * vel + 0.1 * accel[act]
    pos = (pos + 0.1 * vel).clamp(-1.0, 1.0)
    clock += 1
    d_new = (goal - pos).norm(dim=1)
    rew = d_old - d_new - 0.01
    done = ((d_new < 0.05) | (clock >= HORIZON)).float()
    store(ptr, obs, act, rew, observe(), done)
    ptr, size = (ptr + ENVS) % CAP, min(size + ENVS, CAP)
    fresh = torch.rand(2, ENVS, 2, device=DEVICE, generator=gen) * 2 - 1  # new episodes where done
    reset = done.bool()[:, None]
    pos, goal = torch.where(reset, fresh[0], pos), torch.where(reset, fresh[1], goal)
    vel, clock = vel * (1 - done[:, None]), clock * (1 - done)
    for _ in range(UPDATES):
        idx = torch.randint(0, size, (BATCH,), device=DEVICE, generator=gen)
        with torch.no_grad():
            tgt = buf_rew[idx] + GAMMA * (1 - buf_done[idx]) * target(buf_next[idx]).amax(1)
        loss = F.smooth_l1_loss(qnet(buf_obs[idx]).gather(1, buf_act[idx, None]).squeeze(1), tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total_loss += loss.detach() / UPDATES
    if i % 4 == 3:
        target.load_state_dict(qnet.state_dict())
    total_rew += rew.mean()
    timer.end()
timer.report(f"robot_dqn_replay_per_transition variant={args.variant or 'baseline'} "
             f"mean loss {total_loss.item() / args.steps:.6f}, mean reward {total_rew.item() / args.steps:.6f}")
