"""EVA-02-style ViT training whose SwiGLU hidden size is int(4 * 2 / 3 * 1024) = 2730.

Workload: image classification with an EVA-02-style ViT: 14 px patches of 224 x 224 images (256
patches and a class token), learned positions, 6 pre-norm blocks of width 1024 (16 heads of 64,
fused qkv, SDPA) whose MLP is timm's SwiGLU (separate gate and value projections, SiLU, down
projection) with `mlp_ratio=4 * 2 / 3`, so the hidden size is int(1024 * 8 / 3) = 2730; LayerNorm,
class-token head over 1,000 classes; 64 images per step, resized from a pool of 280 px uint8 images on the GPU,
label smoothing 0.1, bf16 autocast, fused AdamW. Every SwiGLU GEMM has 2730 as a leading dimension
(5,460 bytes a row in bf16, not a multiple of 16).

Variant `pad_hidden`: the SwiGLU hidden size rounded up to a multiple of 256 (2816): the same weights
copied in, the 86 extra units zero in both projections and in the down projection (their output and
every gradient to them are exactly zero, so they stay zero under AdamW and the model computes the
same function).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    IMG, PATCH, DIM, HEADS, DEPTH, CLASSES, BATCH, POOL = 224, 14, 1024, 16, 6, 1000, 64, 256
else:
    IMG, PATCH, DIM, HEADS, DEPTH, CLASSES, BATCH, POOL = 56, 14, 64, 4, 2, 10, 4, 8
MLP_RATIO = 4 * 2 / 3


class SwiGLU(nn.Module):
    """timm-style SwiGLU: silu(fc1_g(x)) * fc1_x(x), then fc2."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1_g, self.fc1_x = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1_g(x)) * self.fc1_x(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = SwiGLU(dim, int(dim * MLP_RATIO))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class EvaViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, (IMG // PATCH) ** 2 + 1, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


@torch.no_grad()
def pad_swiglu(mlp: SwiGLU, multiple: int) -> None:
    """Round the hidden size up to `multiple`, keeping the weights and zeroing the new units."""
    hidden = mlp.fc1_g.out_features
    padded = (hidden + multiple - 1) // multiple * multiple
    for name in ("fc1_g", "fc1_x"):
        old: nn.Linear = getattr(mlp, name)
        new = nn.Linear(old.in_features, padded, device=old.weight.device, dtype=old.weight.dtype)
        new.weight.zero_()
        new.bias.zero_()
        new.weight[:hidden] = old.weight
        new.bias[:hidden] = old.bias
        setattr(mlp, name, new)
    old = mlp.fc2
    new = nn.Linear(padded, old.out_features, device=old.weight.device, dtype=old.weight.dtype)
    new.weight.zero_()
    new.weight[:, :hidden] = old.weight
    new.bias.copy_(old.bias)
    mlp.fc2 = new


def main() -> None:
    args = options(__doc__, ("pad_hidden",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = EvaViT()
    if args.variant == "pad_hidden":
        for blk in model.blocks:
            pad_swiglu(blk.mlp, 256)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, IMG * 5 // 4, IMG * 5 // 4), dtype=torch.uint8, device=DEVICE, generator=gen)
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711], device=DEVICE).view(1, 3, 1, 1) * 255

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        idx = torch.randint(0, POOL, (BATCH,), device=DEVICE, generator=gen)
        labels = torch.randint(0, CLASSES, (BATCH,), device=DEVICE, generator=gen)
        images = F.interpolate(pool[idx].float(), size=(IMG, IMG), mode="bilinear", antialias=True, align_corners=False)
        images = (images - mean) / std
        with bf16():
            loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"eva_swiglu_2730 variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
