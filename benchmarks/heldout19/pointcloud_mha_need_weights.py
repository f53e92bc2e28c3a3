"""LiDAR object classifier whose `nn.MultiheadAttention` calls keep the default `need_weights=True`.

A point-cloud transformer for LiDAR object crops (16 objects x 1,024 points of x, y, z and
intensity; a per-point MLP embedding, 6 pre-norm blocks of width 512 with 8 heads, max-pool head,
40 classes; bf16 autocast, fused AdamW). Each block calls `out, _ = self.attn(h, h, h)`, as most
code written against `nn.MultiheadAttention` does, discarding the head-averaged attention weights
it never uses. With the default `need_weights=True` the layer cannot call
`scaled_dot_product_attention`: it computes the (16 x 8, 1,024, 1,024) scores with `bmm`, the
softmax, a second `bmm` and the mean over heads, and keeps the scores and probabilities for the
backward, in every block.

  baseline                  `self.attn(h, h, h)` (need_weights defaults to True)
  --variant need_weights_false   `self.attn(h, h, h, need_weights=False)`: the fused SDPA kernel

Same weights and points; bf16 rounding differs between the explicit softmax path and the fused kernel.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

CLASSES = 40
if CUDA:
    OBJECTS, POINTS, WIDTH, HEADS, LAYERS = 16, 1024, 512, 8, 6
else:
    OBJECTS, POINTS, WIDTH, HEADS, LAYERS = 2, 64, 32, 4, 2


class Block(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.need_weights = need_weights
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        if self.need_weights:
            out, _ = self.attn(h, h, h)
        else:
            out, _ = self.attn(h, h, h, need_weights=False)
        x = x + out
        return x + self.mlp(self.n2(x))


class PointTransformer(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(4, 128), nn.GELU(), nn.Linear(128, WIDTH))
        self.pos = nn.Sequential(nn.Linear(3, 128), nn.GELU(), nn.Linear(128, WIDTH))
        self.blocks = nn.ModuleList(Block(need_weights) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Sequential(nn.Linear(WIDTH, 256), nn.GELU(), nn.Linear(256, CLASSES))

    def forward(self, pts: torch.Tensor) -> torch.Tensor:  # (B, N, 4)
        x = self.embed(pts) + self.pos(pts[..., :3])
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).amax(1))


def lidar_objects(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic object crops: points on a class-dependent box / cylinder surface, jittered, with intensity."""
    g = torch.Generator(device=DEVICE).manual_seed(1)
    labels = torch.randint(0, CLASSES, (steps, OBJECTS), generator=g, device=DEVICE)
    u = torch.rand(steps, OBJECTS, POINTS, 3, generator=g, device=DEVICE) * 2 - 1
    size = 0.5 + (labels[..., None, None].float() % 7) / 4
    cyl = (labels % 2 == 0)[..., None, None]
    ang = u[..., :1] * 3.1416
    ring = torch.cat([torch.cos(ang), torch.sin(ang), u[..., 2:]], -1)
    surf = torch.where(cyl, ring, u / u.abs().amax(-1, keepdim=True)) * size
    xyz = surf + 0.02 * torch.randn(surf.shape, generator=g, device=DEVICE)
    inten = torch.rand(steps, OBJECTS, POINTS, 1, generator=g, device=DEVICE) * (0.3 + labels[..., None, None] / CLASSES)
    return torch.cat([xyz, inten], -1), labels


def main() -> None:
    args = options(__doc__, ("need_weights_false",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = PointTransformer(need_weights=args.variant != "need_weights_false")
    opt = adamw(list(model.parameters()))
    points, labels = lidar_objects(args.steps)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            logits = model(points[i])
        loss = F.cross_entropy(logits.float(), labels[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"pointcloud_mha_need_weights variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
