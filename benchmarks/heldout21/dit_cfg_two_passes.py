"""Class-conditional DiT sampler (12 blocks of width 384 on 32 x 32 x 4 latents, 256 tokens, bf16, 12 Euler
steps per batch of 8 images) with classifier-free guidance done as two forward calls per denoising step, one
conditional and one with the null class, each a small batch of 8 that leaves the GPU waiting on launches."""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, bf16, options
from torch import nn

VARIANT = "batched_cfg"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# images per batch, latent side, width, heads, blocks, denoising steps, classes
BATCH, SIDE, DIM, HEADS, DEPTH, ITERS, CLASSES = (8, 32, 384, 6, 12, 12, 1000) if CUDA else (2, 8, 32, 4, 2, 3, 10)
GUIDE, PATCH, CH = 4.0, 2, 4
TOK = (SIDE // PATCH) ** 2


class DiT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(CH, DIM, PATCH, PATCH)
        self.pos = nn.Parameter(torch.randn(1, TOK, DIM) * 0.02)
        self.label = nn.Embedding(CLASSES + 1, DIM)  # the last row is the null (unconditional) class
        self.time = nn.Sequential(nn.Linear(256, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, PATCH * PATCH * CH)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        half = torch.exp(-math.log(10000) * torch.arange(128, device=x.device) / 128)
        temb = torch.cat([(t[:, None] * half).sin(), (t[:, None] * half).cos()], 1)
        h = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        h = h + (self.time(temb) + self.label(y))[:, None]
        for blk in self.blocks:
            h = blk(h, F.scaled_dot_product_attention)
        h = self.out(self.norm(h)).view(b, SIDE // PATCH, SIDE // PATCH, PATCH, PATCH, CH)
        return h.permute(0, 5, 1, 3, 2, 4).reshape(b, CH, SIDE, SIDE)


with torch.device(DEVICE):
    model = DiT().eval()
    gen = torch.Generator(DEVICE).manual_seed(1)
    noise = torch.randn(args.steps, BATCH, CH, SIDE, SIDE, generator=gen)
    labels = torch.randint(0, CLASSES, (args.steps, BATCH), generator=gen)
    null = torch.full((BATCH,), CLASSES)
times = torch.linspace(1.0, 0.0, ITERS + 1, device=DEVICE)

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode(), bf16():
    for i in range(args.steps):
        timer.tick()
        x, y = noise[i], labels[i]
        for k in range(ITERS):
            t = times[k].expand(BATCH) * 1000
            if args.variant == VARIANT:  # one call on the conditional and null halves together
                both = model(torch.cat([x, x]), torch.cat([t, t]), torch.cat([y, null]))
                cond, uncond = both.chunk(2)
            else:
                cond, uncond = model(x, t, y), model(x, t, null)
            eps = uncond + GUIDE * (cond - uncond)
            x = x - (times[k] - times[k + 1]) * eps.float()
        total += x.abs().mean()
        timer.end()
timer.report(f"dit_cfg_two_passes variant={args.variant or 'baseline'} latent mean |x| {total.item() / args.steps:.6f}")
