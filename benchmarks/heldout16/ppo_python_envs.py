"""PPO rollout collection whose 1,024 CartPole environments are stepped one by one in Python on the step's thread.

Workload: the rollout phase of CleanRL's `ppo.py` (Huang et al.) on CartPole-v1 with 1,024
environments (`--num-envs 1024`) in a `SyncVectorEnv`: per environment step the actor-critic (two
MLPs 4 -> 64 -> 64 -> 2 / 1, tanh, orthogonal initialisation; float32, no grad) picks actions on the
GPU, `action.cpu()` reads them back, the vector env loops over its 1,024 wrapped `CartPoleEnv`
objects in Python (gym's scalar physics: `math.cos`, `math.sin`, Euler integration, termination
tests, a float32 observation array, an automatic reset from the environment's seeded draws;
`RecordEpisodeStatistics`, `OrderEnforcing` and `TimeLimit` around it), concatenates the
observations, and they (and the rewards and dones) go back up with `.to(device)` as blocking
pageable copies; the rollout buffers (observations, actions, log-probabilities, rewards, dones,
values) live on the GPU. One step is 16 environment steps (16,384 transitions). The GPU sits idle
while the host steps ~16,000 Python environments a step.

Variant `gpu_envs`: the same CartPole dynamics written once over (1024,)-shaped float64 tensors on
the GPU (`torch.where` for the force, the termination test and the automatic reset from the same
seeded draws), as batched simulators do (EnvPool, gymnax / Brax, Isaac Gym, gymnasium's vectorised
`CartPoleVectorEnv`); the actions never leave the GPU and nothing is read back inside the rollout.
The same transitions (float64 physics in both; the GPU's and libm's cos / sin may differ in the last
bit, see README's "Not checked").

No extra variant (the baseline's environment step is Python on the host).

The set imports nothing beyond torch, so the stdlib `array` (float32) and Python lists stand in for
gymnasium's numpy arrays on the host side (which makes each Python environment step cheaper than
gymnasium's: a numpy version of the same classes took ~5x longer per environment step on the CPU
this was written on).
"""

import itertools
import math
from array import array
from copy import deepcopy

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

ENVS, ENV_STEPS, MAX_RESETS = (1024, 16, 64) if CUDA else (8, 16, 64)
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASSPOLE + MASSCART
POLEMASS_LENGTH = MASSPOLE * LENGTH
THETA_THRESHOLD, X_THRESHOLD, MAX_EPISODE_STEPS = 12 * 2 * math.pi / 360, 2.4, 500


def discrete_contains(x: object, n: int = 2) -> bool:
    """gymnasium's `Discrete(2).contains` for a Python int."""
    return isinstance(x, int) and 0 <= x < n


class CartPoleEnv:
    """gym's CartPole-v1 step on scalar Python floats; resets draw from this environment's seeded table.
    Observations are float32 arrays (stdlib `array`, standing in for gymnasium's numpy arrays)."""

    def __init__(self, resets: list[list[float]]) -> None:
        self.resets, self.n_resets = resets, 0
        self.state: tuple[float, ...] | None = tuple(resets[0])
        self.steps_beyond_terminated: int | None = None

    @property
    def unwrapped(self) -> "CartPoleEnv":
        return self

    def reset(self) -> tuple[array, dict]:
        self.n_resets += 1
        self.state = tuple(self.resets[self.n_resets % MAX_RESETS])
        self.steps_beyond_terminated = None
        return array("f", self.state), {}

    def step(self, action: int) -> tuple[array, float, bool, bool, dict]:
        assert discrete_contains(action), f"{action!r} ({type(action)}) invalid"
        assert self.state is not None, "Call reset before using step method."
        x, x_dot, theta, theta_dot = self.state
        force = FORCE_MAG if action == 1 else -FORCE_MAG
        costheta = math.cos(theta)
        sintheta = math.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x = x + TAU * x_dot
        x_dot = x_dot + TAU * xacc
        theta = theta + TAU * theta_dot
        theta_dot = theta_dot + TAU * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        terminated = bool(x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD)
        if not terminated:
            reward = 1.0
        elif self.steps_beyond_terminated is None:
            self.steps_beyond_terminated = 0
            reward = 1.0
        else:
            self.steps_beyond_terminated += 1
            reward = 0.0
        return array("f", self.state), reward, terminated, False, {}


class Wrapper:
    def __init__(self, env: "CartPoleEnv | Wrapper") -> None:
        self.env = env

    @property
    def unwrapped(self) -> CartPoleEnv:
        return self.env.unwrapped

    def reset(self) -> tuple[array, dict]:
        return self.env.reset()


class TimeLimit(Wrapper):
    def __init__(self, env: "CartPoleEnv | Wrapper") -> None:
        super().__init__(env)
        self.elapsed = 0

    def reset(self) -> tuple[array, dict]:
        self.elapsed = 0
        return self.env.reset()

    def step(self, action: int) -> tuple[array, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.elapsed += 1
        if self.elapsed >= MAX_EPISODE_STEPS:
            truncated = True
        return obs, reward, terminated, truncated, info


class OrderEnforcing(Wrapper):
    def step(self, action: int) -> tuple[array, float, bool, bool, dict]:
        return self.env.step(action)


class RecordEpisodeStatistics(Wrapper):
    """gymnasium's wrapper, which CleanRL's `make_env` adds to every environment."""

    def __init__(self, env: "CartPoleEnv | Wrapper") -> None:
        super().__init__(env)
        self.episode_return, self.episode_length = 0.0, 0

    def step(self, action: int) -> tuple[array, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        assert isinstance(info, dict)
        self.episode_return += reward
        self.episode_length += 1
        if terminated or truncated:
            info["episode"] = {"r": self.episode_return, "l": self.episode_length}
            self.episode_return, self.episode_length = 0.0, 0
        return obs, reward, terminated, truncated, info


class SyncVectorEnv:
    """gymnasium's SyncVectorEnv (same-step autoreset, `copy=True`): a Python loop over the environments,
    observations concatenated into one float32 buffer."""

    def __init__(self, resets: list[list[list[float]]]) -> None:
        self.envs = [RecordEpisodeStatistics(OrderEnforcing(TimeLimit(CartPoleEnv(r)))) for r in resets]
        self.observations = array("f")

    def first_observation(self) -> array:
        return array("f", itertools.chain.from_iterable(env.unwrapped.state for env in self.envs))

    def step(self, actions: list[int]) -> tuple[array, list[float], list[bool], list[bool], dict]:
        observations, rewards, terminateds, truncateds, infos = [], [], [], [], {}
        for i, (env, action) in enumerate(zip(self.envs, actions, strict=True)):
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                old_obs, old_info = obs, info
                obs, info = env.reset()
                info["final_observation"], info["final_info"] = old_obs, old_info
            observations.append(obs)
            rewards.append(reward)
            terminateds.append(terminated)
            truncateds.append(truncated)
            for key, value in info.items():
                infos.setdefault(key, [None] * len(self.envs))[i] = value
        self.observations = array("f", itertools.chain.from_iterable(observations))
        return deepcopy(self.observations), rewards, terminateds, truncateds, infos


class GpuCartPole:
    """The same dynamics over (ENVS,) float64 tensors on the device."""

    def __init__(self, resets: torch.Tensor) -> None:
        self.resets = resets  # (ENVS, MAX_RESETS, 4) float64
        self.state = resets[:, 0].clone()
        self.n_resets = torch.zeros(ENVS, dtype=torch.long, device=resets.device)
        self.elapsed = torch.zeros(ENVS, dtype=torch.long, device=resets.device)
        self.rows = torch.arange(ENVS, device=resets.device)

    def observe(self) -> torch.Tensor:
        return self.state.float()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(action == 1, FORCE_MAG, -FORCE_MAG).double()
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot.pow(2) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta.pow(2) / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x = x + TAU * x_dot
        x_dot = x_dot + TAU * xacc
        theta = theta + TAU * theta_dot
        theta_dot = theta_dot + TAU * thetaacc
        self.elapsed += 1
        done = ((x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD) | (theta > THETA_THRESHOLD)
                | (self.elapsed >= MAX_EPISODE_STEPS))
        self.n_resets += done
        fresh = self.resets[self.rows, self.n_resets % MAX_RESETS]
        self.state = torch.where(done[:, None], fresh, torch.stack([x, x_dot, theta, theta_dot], 1))
        self.elapsed = torch.where(done, 0, self.elapsed)
        return self.state.float(), torch.ones(ENVS, device=action.device), done.float()


def layer(i: int, o: int, std: float) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer(4, 64, math.sqrt(2)), nn.Tanh(), layer(64, 64, math.sqrt(2)), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(4, 64, math.sqrt(2)), nn.Tanh(), layer(64, 64, math.sqrt(2)), nn.Tanh(), layer(64, 2, 0.01))

    def act(self, obs: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample from the categorical policy (Gumbel-max on given uniforms); action, its log-probability, value."""
        logp = F.log_softmax(self.actor(obs), -1)
        action = (logp - torch.log(-torch.log(uniform))).argmax(-1)
        return action, logp.gather(1, action[:, None])[:, 0], self.critic(obs)[:, 0]


def main() -> None:
    args = options(__doc__, ("gpu_envs",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        agent = Agent()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    resets = torch.rand(ENVS, MAX_RESETS, 4, device=DEVICE, generator=gen, dtype=torch.float64) * 0.1 - 0.05
    gpu_envs = GpuCartPole(resets) if args.variant == "gpu_envs" else None
    py_envs = None if gpu_envs is not None else SyncVectorEnv(resets.cpu().tolist())
    next_obs = gpu_envs.observe() if gpu_envs is not None else torch.frombuffer(py_envs.first_observation(), dtype=torch.float32).view(ENVS, 4).to(DEVICE)
    next_done = torch.zeros(ENVS, device=DEVICE)
    obs_buf = torch.zeros(ENV_STEPS, ENVS, 4, device=DEVICE)
    actions, logprobs, rewards, dones, values = (torch.zeros(ENV_STEPS, ENVS, device=DEVICE) for _ in range(5))

    reward_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    episodes = torch.zeros((), device=DEVICE, dtype=torch.float64)
    value_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            for t in range(ENV_STEPS):
                obs_buf[t], dones[t] = next_obs, next_done
                uniform = torch.rand(ENVS, 2, device=DEVICE, generator=gen).clamp_min(1e-12)
                action, logprob, value = agent.act(next_obs, uniform)
                actions[t], logprobs[t], values[t] = action, logprob, value
                if gpu_envs is not None:
                    next_obs, rewards[t], next_done = gpu_envs.step(action)
                else:
                    obs, reward, terminations, truncations, _ = py_envs.step(action.cpu().tolist())
                    next_obs = torch.frombuffer(obs, dtype=torch.float32).view(ENVS, 4).to(DEVICE)
                    rewards[t] = torch.tensor(reward).to(DEVICE).view(-1)
                    next_done = torch.tensor([a or b for a, b in zip(terminations, truncations, strict=True)],
                                             dtype=torch.float32).to(DEVICE)
            reward_sum += rewards.sum()
            episodes += dones[1:].sum() + next_done.sum()
            value_sum += values.double().sum() + obs_buf.double().sum()
            timer.end()
    timer.report(f"ppo_python_envs variant={args.variant or 'baseline'} rewards {reward_sum.item():.0f} "
                 f"episodes ended {episodes.item():.0f} value+obs sum {value_sum.item():.4f}")


if __name__ == "__main__":
    main()
