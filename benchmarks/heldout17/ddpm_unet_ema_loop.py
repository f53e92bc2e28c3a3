"""DDPM training of a small image UNet whose EMA copy of the weights is updated one parameter at a time.

A denoising-diffusion training step (noise prediction, MSE, bf16 autocast, fused AdamW) on a
convolutional UNet with GroupNorm residual blocks and a sinusoidal time embedding, followed, as in
nearly every diffusion training script, by an update of an exponential moving average (EMA) of the
weights that is used for sampling. The baseline updates the EMA the way the `EMAModel.step` of many
diffusion code bases does by default (cited from memory: diffusers' `EMAModel(foreach=False)`,
`s_param.sub_(one_minus_decay * (s_param - param))` per parameter): a Python loop over the ~170
parameter tensors, three small kernels each.

Variants:
- baseline: the per-parameter EMA loop (`sub`, `mul`, in-place `sub_` per tensor).
- foreach_ema: the same update as one multi-tensor call, `torch._foreach_lerp_(ema, params, 1 - decay)`
  (s - (1-d)(s - p) == lerp(s, p, 1-d)), a handful of kernel launches for all tensors.

Sources: the `foreach` argument of `torch.optim.AdamW` (its docstring, read in the installed torch
2.13: "we will try to use foreach over the for-loop implementation on CUDA, since it is usually
significantly more performant"); the PyTorch
performance tuning guide's advice to group many small operations (cited from memory); diffusers'
`EMAModel` (cited from memory).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


class ResBlock(nn.Module):
    """GroupNorm - SiLU - conv, plus the time embedding, twice; a 1x1 skip when the width changes."""

    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class UNet(nn.Module):
    """Three resolutions, two residual blocks each way, a middle pair; skip connections by concatenation."""

    def __init__(self, ch: tuple[int, ...] = (64, 128, 256), tdim: int = 256) -> None:
        super().__init__()
        self.tdim = tdim
        self.tmlp = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.pool = nn.ModuleList()
        widths, c = [ch[0]], ch[0]
        for i, w in enumerate(ch):
            for _ in range(2):
                self.down.append(ResBlock(c, w, tdim))
                c = w
                widths.append(c)
            self.pool.append(nn.Conv2d(c, c, 3, stride=2, padding=1) if i < len(ch) - 1 else nn.Identity())
        self.mid = nn.ModuleList([ResBlock(c, c, tdim), ResBlock(c, c, tdim)])
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i, w in reversed(list(enumerate(ch))):
            for _ in range(2):
                self.up.append(ResBlock(c + widths.pop(), w, tdim))
                c = w
            self.upsample.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else nn.Identity())
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))
        self.levels = len(ch)

    def embed(self, t: torch.Tensor) -> torch.Tensor:
        half = self.tdim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
        arg = t.float()[:, None] * freqs[None]
        return self.tmlp(torch.cat([arg.sin(), arg.cos()], dim=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.embed(t)
        h = self.inp(x)
        skips = [h]
        for lvl in range(self.levels):
            for j in range(2):
                h = self.down[2 * lvl + j](h, temb)
                skips.append(h)
            if lvl < self.levels - 1:
                h = self.pool[lvl](h)
        for blk in self.mid:
            h = blk(h, temb)
        for lvl in range(self.levels):
            for j in range(2):
                h = self.up[2 * lvl + j](torch.cat([h, skips.pop()], dim=1), temb)
            if lvl < self.levels - 1:
                h = self.upsample[lvl](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(h)


def main() -> None:
    args = options(__doc__, ("foreach_ema",)).parse_args()
    torch.manual_seed(0)
    batch, res, ch = (32, 32, (64, 128, 256)) if CUDA else (2, 16, (16, 32, 32))
    with torch.device(DEVICE):
        model = UNet(ch)
    ema = [p.detach().clone() for p in model.parameters()]
    params = list(model.parameters())
    opt = adamw(params)
    steps_total = 1000
    betas = torch.linspace(1e-4, 0.02, steps_total, device=DEVICE)
    alpha_bar = torch.cumprod(1.0 - betas, dim=0)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    images = torch.rand(8, batch, 3, res, res, device=DEVICE, generator=gen) * 2 - 1  # a small synthetic "dataset"
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    for i in range(args.steps):
        timer.tick()
        x0 = images[i % images.size(0)]
        t = torch.randint(0, steps_total, (batch,), device=DEVICE, generator=gen)
        noise = torch.randn(x0.shape, device=DEVICE, generator=gen)
        ab = alpha_bar[t][:, None, None, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        with bf16():
            loss = F.mse_loss(model(xt, t).float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # EMA of the weights, warm-up schedule as in common diffusion code
        decay = min(0.9999, (1 + i) / (10 + i))
        with torch.no_grad():
            if args.variant == "foreach_ema":
                torch._foreach_lerp_(ema, params, 1.0 - decay)
            else:
                one_minus_decay = 1.0 - decay
                for s_param, param in zip(ema, params, strict=True):
                    s_param.sub_(one_minus_decay * (s_param - param))
        total += loss.detach()
        timer.end()
    ema_norm = sum(float(e.float().norm()) for e in ema[:8])
    timer.report(f"ddpm_unet_ema_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"ema norm {ema_norm:.4f} tensors {len(params)}")


if __name__ == "__main__":
    main()
