"""Lagrangian tracking of plastic particles whose state is an (N, 8) array of structures, read by column.

8,388,608 particles (x, y, depth, u, v, w, age, sinking speed: float32) are advected through an
analytic time-dependent double-gyre ocean flow with sinking, 4 midpoint (RK2) substeps per step,
walls and sea floor clamped: a few dozen element-wise kernels per substep, all memory-bound. The
state is one (N, 8) tensor, as particle code usually keeps it (one row per particle,
`torch.cat([pos, vel, age, ws], 1)`), and every kernel reads or writes columns `p[:, j]`: 4-byte
elements 32 bytes apart, so each column access moves the whole 268 MB array through DRAM sectors
for 34 MB of data: ~30 such sweeps per substep (~8 GB) next to ~4 GB of contiguous temporaries.

--variant soa_layout: the same state stored as a structure of arrays, `p.t().contiguous()` (8, N)
once at start: each column `s[j]` is contiguous and read with coalesced, vectorised loads; the same
element-wise operations in the same order.
"""

import math

import torch
from _common import CUDA, DEVICE, StepTimer, options

args = options(__doc__, ("soa_layout",)).parse_args()
N = 8_388_608 if CUDA else 4096
SUBSTEPS, DT = 4, 0.02
A, EPS, OMEGA, DEPTH = 0.1, 0.25, 2 * math.pi / 10, 50.0


def flow(x: torch.Tensor, y: torch.Tensor, t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The double gyre on [0, 2] x [0, 1] (Shadden et al.): velocities at (x, y), time t."""
    a = EPS * math.sin(OMEGA * t)
    b = 1 - 2 * a
    f = a * x * x + b * x
    dfdx = 2 * a * x + b
    u = -math.pi * A * torch.sin(math.pi * f) * torch.cos(math.pi * y)
    v = math.pi * A * torch.cos(math.pi * f) * torch.sin(math.pi * y) * dfdx
    return u, v


def substep(col: list[torch.Tensor], t: float) -> None:
    """One midpoint step on the columns x, y, z, u, v, w, age, ws (views into the state), in place."""
    x, y, z, u, v, w, age, ws = col
    u1, v1 = flow(x, y, t)
    u2, v2 = flow(x + 0.5 * DT * u1, y + 0.5 * DT * v1, t + 0.5 * DT)
    u.copy_(u2)
    v.copy_(v2)
    torch.mul(ws, -1.0 - 0.5 * torch.exp(z / DEPTH), out=w)  # sinking slows with depth (z <= 0)
    x.add_(u, alpha=DT)
    y.add_(v, alpha=DT)
    z.add_(w, alpha=DT)
    x.clamp_(0.0, 2.0)
    y.clamp_(0.0, 1.0)
    z.clamp_(-DEPTH, 0.0)
    age.add_(DT)


gen = torch.Generator(DEVICE).manual_seed(23)
start = torch.rand(N, 3, device=DEVICE, generator=gen) * torch.tensor([2.0, 1.0, -5.0], device=DEVICE)
sink = torch.rand(N, 1, device=DEVICE, generator=gen) * 0.05
state = torch.cat([start, torch.zeros(N, 4, device=DEVICE), sink], 1)  # (N, 8), one row per particle
if args.variant == "soa_layout":
    state = state.t().contiguous()  # (8, N), one row per quantity
    columns = list(state.unbind(0))
else:
    columns = list(state.unbind(1))

t = 0.0
total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for _ in range(args.steps):
    timer.tick()
    for _ in range(SUBSTEPS):
        substep(columns, t)
        t += DT
    total += columns[0].mean(dtype=torch.float64) + columns[2].mean(dtype=torch.float64)
    timer.end()
timer.report(f"ocean_particles_aos_columns variant={args.variant or 'baseline'} "
             f"position checksum {total.item() / args.steps:.6f}, mean age {columns[6].mean().item():.3f}")
