"""A ViT-style image classifier (patch embedding, pre-norm attention + MLP blocks) trained in fp32.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/vit_train.py
Fixes: --fix tf32 (TF32 matmuls), --fix bf16 (bf16 autocast). On the GPU: 224x224 images, 16x16
patches (197 tokens), width 768, 12 heads, 6 blocks, batch 64, AdamW. Steps are marked by tracekit's
optimizer.step() hook; at the end it prints the mean step time measured without the profiler.
"""

import contextlib

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, img: int, patch: int, dim: int, heads: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def main() -> None:
    args = options(__doc__, ("tf32", "bf16")).parse_args()
    img, patch, dim, heads, depth, batch = (224, 16, 768, 12, 6, 64) if CUDA else (32, 8, 32, 2, 1, 2)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.fix == "tf32"
    torch.manual_seed(0)
    model = ViT(img, patch, dim, heads, depth, 1000).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 3, img, img, device=DEVICE)
    y = torch.randint(0, 1000, (batch,), device=DEVICE)
    def loss_of(i: int) -> torch.Tensor:
        ctx = torch.autocast(DEVICE, torch.bfloat16) if args.fix == "bf16" else contextlib.nullcontext()
        with ctx:
            loss = F.cross_entropy(model(x), y)
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"vit_train fix={args.fix or 'none'} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
