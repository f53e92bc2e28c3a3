"""Diffusion-policy action sampler whose compiled denoising step reads the scheduler's Python step index.

Visuomotor-style diffusion policy at inference (64 robots per call, an action chunk of 16 x 7
joint targets, DDIM with 24 of 100 cosine-schedule timesteps, eta 0): a 1-D conditional UNet
(FiLM-conditioned residual conv blocks, GroupNorm, Mish; widths 128/256) predicts the noise and a
DDIM scheduler updates the chunk. The user compiles the whole denoising step, network and
`scheduler.step`, with `torch.compile` (default mode). The scheduler works like the popular
diffusion libraries' ones: it keeps `self.step_index`, a Python int, reads its timestep and
alpha-bar values from Python lists at that index and increments it after each update. Dynamo
guards on the int, so each DDIM iteration is a new graph: 8 recompilations in the first call,
then `recompile_limit` (8) is hit and every later iteration (16 of the 24, each planning call)
runs eagerly, op by op, with the guards of the 8 cached graphs checked first.

  baseline             `scheduler.step` reads `self.step_index` (a Python int) inside the compiled step
  --variant tensor_step   the schedule's values as device tensors indexed by a 0-d device tensor passed
                       to the compiled step: one graph for all 24 iterations

Same weights, observations and initial noise; the math is the same, but eager and compiled
kernels round differently (the baseline runs 8 iterations compiled and 16 eagerly).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

ACTION, HORIZON, OBS, TRAIN_T, INFER_T = 7, 16, 40, 100, 24
if CUDA:
    ROBOTS, WIDTHS, COND = 64, (128, 256), 256
else:
    ROBOTS, WIDTHS, COND = 4, (16, 32), 32


class Conv1dBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 5, padding=2)
        self.norm = nn.GroupNorm(8, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(self.norm(self.conv(x)))


class CondResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, cond: int) -> None:
        super().__init__()
        self.b1, self.b2 = Conv1dBlock(cin, cout), Conv1dBlock(cout, cout)
        self.film = nn.Linear(cond, 2 * cout)
        self.res = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        scale, bias = self.film(F.mish(c)).unsqueeze(-1).chunk(2, dim=1)
        h = self.b1(x) * scale + bias
        return self.b2(h) + self.res(x)


class Denoiser(nn.Module):
    """A small ConditionalUnet1D: two levels, a middle, one up level with a skip, FiLM on (time, obs)."""

    def __init__(self) -> None:
        super().__init__()
        w0, w1 = WIDTHS
        self.t_dim = 64
        self.time_mlp = nn.Sequential(nn.Linear(self.t_dim, 4 * self.t_dim), nn.Mish(), nn.Linear(4 * self.t_dim, self.t_dim))
        cond = self.t_dim + COND
        self.down0 = nn.ModuleList([CondResBlock(ACTION, w0, cond), CondResBlock(w0, w0, cond)])
        self.downsample = nn.Conv1d(w0, w0, 3, 2, 1)
        self.down1 = nn.ModuleList([CondResBlock(w0, w1, cond), CondResBlock(w1, w1, cond)])
        self.mid = nn.ModuleList([CondResBlock(w1, w1, cond), CondResBlock(w1, w1, cond)])
        self.upsample = nn.ConvTranspose1d(w1, w1, 4, 2, 1)
        self.up0 = nn.ModuleList([CondResBlock(w1 + w0, w0, cond), CondResBlock(w0, w0, cond)])
        self.final = nn.Sequential(Conv1dBlock(w0, w0), nn.Conv1d(w0, ACTION, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, obs_feat: torch.Tensor) -> torch.Tensor:
        half = self.t_dim // 2
        freqs = torch.exp(torch.arange(half, device=x.device) * (-math.log(10000.0) / (half - 1)))
        arg = t[:, None] * freqs[None]
        c = torch.cat([self.time_mlp(torch.cat([arg.sin(), arg.cos()], -1)), obs_feat], -1)
        h = x.transpose(1, 2)  # (B, ACTION, HORIZON)
        for blk in self.down0:
            h = blk(h, c)
        skip = h
        h = self.downsample(h)
        for blk in (*self.down1, *self.mid):
            h = blk(h, c)
        h = torch.cat([self.upsample(h), skip], 1)
        for blk in self.up0:
            h = blk(h, c)
        return self.final(h).transpose(1, 2)


class DDIMScheduler:
    """DDIM (eta 0) over a cosine alpha-bar schedule; `step` follows the libraries' `step_index` design."""

    def __init__(self) -> None:
        def f(t: float) -> float:
            return math.cos((t / TRAIN_T + 0.008) / 1.008 * math.pi / 2) ** 2

        self.alpha_bar = [f(t + 1) / f(0) for t in range(TRAIN_T)]
        stride = TRAIN_T // INFER_T
        self.timesteps = [TRAIN_T - 1 - k * stride for k in range(INFER_T)]
        self.step_index = 0
        # the same values per DDIM iteration as device tensors (used by the tensor_step variant)
        rows = [self.coefficients(k) for k in range(INFER_T)]
        self.table = torch.tensor(rows, dtype=torch.float32, device=DEVICE)  # (INFER_T, 5)

    def coefficients(self, k: int) -> tuple[float, float, float, float, float]:
        """(timestep, sqrt(1 - a_t), sqrt(a_t), sqrt(a_prev), sqrt(1 - a_prev)) of iteration k."""
        a_t = self.alpha_bar[self.timesteps[k]]
        a_prev = self.alpha_bar[self.timesteps[k + 1]] if k + 1 < INFER_T else 1.0
        return float(self.timesteps[k]), math.sqrt(1 - a_t), math.sqrt(a_t), math.sqrt(a_prev), math.sqrt(1 - a_prev)

    def set_timesteps(self) -> None:
        self.step_index = 0

    def timestep(self) -> float:
        return float(self.timesteps[self.step_index])

    def step(self, eps: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        _, s1m, sa, sp, s1mp = self.coefficients(self.step_index)
        x0 = ((x - s1m * eps) / sa).clamp(-1.0, 1.0)
        self.step_index += 1
        return sp * x0 + s1mp * eps

    def row(self, k: torch.Tensor) -> torch.Tensor:
        """Iteration k's five values, gathered on the device (k: a 1-element int64 device tensor)."""
        return self.table.index_select(0, k)[0]

    def step_at(self, eps: torch.Tensor, x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        x0 = ((x - row[1] * eps) / row[2]).clamp(-1.0, 1.0)
        return row[3] * x0 + row[4] * eps


def main() -> None:
    args = options(__doc__, ("tensor_step",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        obs_encoder = nn.Sequential(nn.Linear(OBS, 2 * COND), nn.Mish(), nn.Linear(2 * COND, COND))
        net = Denoiser()
    sched = DDIMScheduler()

    def denoise_step(x: torch.Tensor, obs_feat: torch.Tensor) -> torch.Tensor:
        t = torch.full((x.shape[0],), sched.timestep(), device=x.device)
        return sched.step(net(x, t, obs_feat), x)

    def denoise_step_at(x: torch.Tensor, obs_feat: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        row = sched.row(k)
        t = row[0].expand(x.shape[0])
        return sched.step_at(net(x, t, obs_feat), x, row)

    step_fn = torch.compile(denoise_step)
    step_at_fn = torch.compile(denoise_step_at)
    ks = [torch.tensor([k], device=DEVICE) for k in range(INFER_T)]

    g = torch.Generator(device=DEVICE).manual_seed(1)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            obs = torch.randn(ROBOTS, OBS, generator=g, device=DEVICE)  # joint states of two frames
            x = torch.randn(ROBOTS, HORIZON, ACTION, generator=g, device=DEVICE)
            obs_feat = obs_encoder(obs)
            sched.set_timesteps()
            for k in range(INFER_T):
                x = step_at_fn(x, obs_feat, ks[k]) if args.variant == "tensor_step" else step_fn(x, obs_feat)
            total += x.double().abs().mean()
            timer.end()
    timer.report(f"diffusion_policy_step_index variant={args.variant or 'baseline'} mean |action| {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
