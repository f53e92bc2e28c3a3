"""DINO self-distillation with multi-crop, every crop sent through the student ViT in its own forward.

Batching. DINO on 32 images per step: 2 global crops of 224 x 224 and 6 local crops of 96 x 96
(bilinear resize of 128 x 128 regions) per image; student ViT-S/16-style (width 384, 6 heads, 6
pre-norm blocks, MLP 1536, class token, learned 14 x 14 position embedding bicubic-interpolated to
6 x 6 for local crops) with a DINO head (MLP 384 -> 1024 -> 1024 -> 256, L2 norm, 4,096
prototypes); the teacher is an EMA copy that sees the global crops; DINO loss (teacher softmax at
temperature 0.04 after centering, student log-softmax at 0.1, every teacher crop against every
other student crop), bf16 autocast, fused AdamW, teacher EMA 0.996 and center update. The baseline
calls `student(crop)` once per crop (8 forwards of 32 images, 6 of them of 37 tokens) and
`teacher(crop)` once per global crop: ~10 small-batch forwards and 8 backwards per step.

Variant `grouped`: crops of the same resolution concatenated (as DINO's own `MultiCropWrapper`
does): one student forward for the 64 global crops, one for the 192 local crops, one teacher
forward for the 64 global crops, outputs split back per crop; the same loss.
"""

import copy

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train
from torch import nn

VARIANTS = ("grouped",)
if CUDA:
    BATCH, DIM, HEADS, DEPTH, GLOBAL, LOCAL, N_LOCAL, OUT = 32, 384, 6, 6, 224, 96, 6, 4096
else:
    BATCH, DIM, HEADS, DEPTH, GLOBAL, LOCAL, N_LOCAL, OUT = 2, 32, 2, 2, 64, 32, 2, 64
PATCH = 16
GRID = GLOBAL // PATCH


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class ViT(nn.Module):
    """Patch embedding, class token, interpolated positions, pre-norm blocks, DINO head on the class token."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + GRID * GRID, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 256))
        self.last = nn.Linear(256, OUT, bias=False)

    def positions(self, side: int) -> torch.Tensor:
        if side == GRID:
            return self.pos
        grid = self.pos[:, 1:].reshape(1, GRID, GRID, DIM).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(side, side), mode="bicubic", align_corners=False)
        return torch.cat((self.pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, side * side, DIM)), 1)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(img)
        side = x.shape[-1]
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x.flatten(2).transpose(1, 2)), 1) + self.positions(side)
        for blk in self.blocks:
            x = blk(x, attend)
        z = F.normalize(self.mlp(self.norm(x[:, 0])), dim=-1)
        return self.last(z)


def crops_of(img: torch.Tensor) -> list[torch.Tensor]:
    """2 global 224 crops and N_LOCAL local 96 crops (resized 128 regions) at fixed offsets."""
    g = [img[:, :, o : o + GLOBAL, o : o + GLOBAL] for o in (0, img.shape[-1] - GLOBAL)]
    region = GLOBAL * 4 // 7
    step = (img.shape[-1] - region) // max(N_LOCAL - 1, 1)
    loc = [F.interpolate(img[:, :, j * step : j * step + region, (N_LOCAL - 1 - j) * step : (N_LOCAL - 1 - j) * step + region],
                         size=(LOCAL, LOCAL), mode="bilinear", align_corners=False) for j in range(N_LOCAL)]
    return [c.contiguous() for c in g] + loc


def dino_loss(student: list[torch.Tensor], teacher: list[torch.Tensor], center: torch.Tensor) -> torch.Tensor:
    t = [F.softmax((o.float() - center) / 0.04, -1) for o in teacher]
    s = [F.log_softmax(o.float() / 0.1, -1) for o in student]
    terms = [(-tq * sv).sum(-1).mean() for iq, tq in enumerate(t) for v, sv in enumerate(s) if v != iq]
    return torch.stack(terms).mean()


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    student = ViT().to(DEVICE)
    teacher = copy.deepcopy(student).requires_grad_(False)
    s_params, t_params = list(student.parameters()), list(teacher.parameters())
    opt = adamw(s_params)
    center = torch.zeros(1, OUT, device=DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    side = GLOBAL + GLOBAL // 7

    def loss_of(i: int) -> torch.Tensor:
        crops = crops_of(torch.rand(BATCH, 3, side, side, device=DEVICE, generator=gen))
        with bf16():
            if args.variant == "grouped":
                s_out = [*student(torch.cat(crops[:2])).chunk(2), *student(torch.cat(crops[2:])).chunk(N_LOCAL)]
                with torch.no_grad():
                    t_out = list(teacher(torch.cat(crops[:2])).chunk(2))
            else:
                s_out = [student(c) for c in crops]
                with torch.no_grad():
                    t_out = [teacher(c) for c in crops[:2]]
            loss = dino_loss(s_out, t_out, center)
        with torch.no_grad():
            center.mul_(0.9).add_(torch.cat(t_out).float().mean(0, keepdim=True), alpha=0.1)
        return loss

    def ema(_loss: torch.Tensor) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(t_params, s_params, 1.0 - 0.996)

    train("multicrop_loop", args.variant, args.steps, opt, loss_of, after=ema)


if __name__ == "__main__":
    main()
