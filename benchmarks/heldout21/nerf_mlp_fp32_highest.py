"""NeRF training (8-layer width-256 MLP with a skip, view-dependent colour head, 4,096 rays x 64 samples, volume
rendering) in float32 with PyTorch's default float32 matmul precision ("highest"): every Linear runs as a full
float32 GEMM on the CUDA cores, not on the tensor cores (TF32)."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

VARIANT = "tf32_matmul"
args = options(__doc__, (VARIANT,)).parse_args()
if args.variant == VARIANT:
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores for float32 matmuls
torch.manual_seed(0)
# rays per step, samples per ray, width
RAYS, SAMPLES, W = (4096, 64, 256) if CUDA else (16, 8, 32)
FREQ_X, FREQ_D = 10, 4


def encode(p: torch.Tensor, freqs: int) -> torch.Tensor:
    bands = 2.0 ** torch.arange(freqs, device=p.device) * torch.pi
    ang = p[..., None] * bands  # (..., 3, F)
    return torch.cat([p, ang.sin().flatten(-2), ang.cos().flatten(-2)], -1)


class NeRF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        dx, dd = 3 + 6 * FREQ_X, 3 + 6 * FREQ_D
        self.trunk1 = nn.ModuleList([nn.Linear(dx, W)] + [nn.Linear(W, W) for _ in range(3)])
        self.trunk2 = nn.ModuleList([nn.Linear(W + dx, W)] + [nn.Linear(W, W) for _ in range(3)])
        self.sigma, self.feat = nn.Linear(W, 1), nn.Linear(W, W)
        self.rgb = nn.Sequential(nn.Linear(W + dd, W // 2), nn.ReLU(), nn.Linear(W // 2, 3))

    def forward(self, ex: torch.Tensor, ed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = ex
        for lin in self.trunk1:
            h = F.relu(lin(h))
        h = torch.cat([h, ex], -1)
        for lin in self.trunk2:
            h = F.relu(lin(h))
        return F.relu(self.sigma(h)).squeeze(-1), torch.sigmoid(self.rgb(torch.cat([self.feat(h), ed], -1)))


with torch.device(DEVICE):
    model = NeRF()
    gen = torch.Generator(DEVICE).manual_seed(1)
    origins = torch.rand(8, RAYS, 3, generator=gen) - 0.5
    dirs = F.normalize(torch.randn(8, RAYS, 3, generator=gen), dim=-1)
    colours = torch.rand(8, RAYS, 3, generator=gen)
    depths = torch.linspace(0.1, 2.0, SAMPLES)
opt = adamw(list(model.parameters()))


def loss_of(i: int) -> torch.Tensor:
    o, d = origins[i % 8], dirs[i % 8]
    pts = o[:, None] + d[:, None] * depths[None, :, None]  # (R, S, 3)
    sigma, rgb = model(encode(pts, FREQ_X), encode(d, FREQ_D)[:, None].expand(-1, SAMPLES, -1))
    delta = torch.diff(depths, append=depths[-1:] + 1e10)
    alpha = 1 - torch.exp(-sigma * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1] + 1e-10], 1), 1)
    out = ((alpha * trans)[..., None] * rgb).sum(1)
    return F.mse_loss(out, colours[i % 8])


train("nerf_mlp_fp32_highest", args.variant, args.steps, opt, loss_of)
