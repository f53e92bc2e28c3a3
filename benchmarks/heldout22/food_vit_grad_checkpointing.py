"""Food-photo ViT fine-tuning with activation checkpointing left on (optimizer / training loop).

Workload: a ViT-B/16-sized classifier (16 x 16 patches of 224 x 224 photos, 197 tokens, 12 pre-norm
blocks of width 768 with 12 heads, SDPA, 101 dish classes) fine-tuned with bf16 autocast and fused
AdamW, 64 photos per step from a GPU-resident set of 512.

Cause (baseline): the training script wraps every block in
`torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)` (timm's `set_grad_checkpointing()`,
Hugging Face's `gradient_checkpointing=True`), copied from a large-model recipe. The model's activations
(~5 GB at this batch) fit easily, yet every block's forward is run twice: once without saving
activations and again inside the backward, about a third more GEMM, attention and elementwise work per
step for memory that was never short.

Fix (`--variant no_checkpointing`): call the blocks directly and let autograd keep their activations.
The same blocks, weights, data and update; the recomputation reproduces the same forward values, so
the losses should match (flash attention's backward may differ in the last bits between any two runs).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train
from torch import nn
from torch.utils.checkpoint import checkpoint

VARIANTS = ("no_checkpointing",)
IMG, PATCH, DIM, HEADS, DEPTH, BATCH, BANK = (224, 16, 768, 12, 12, 64, 512) if CUDA else (32, 8, 64, 4, 2, 4, 8)
CLASSES = 101


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class FoodViT(nn.Module):
    """Patch embedding, class token, learned positions, pre-norm blocks, final norm and a linear head."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.patch = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        tokens = (IMG // PATCH) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            if self.checkpointed:
                x = checkpoint(block, x, attend, use_reentrant=False)
            else:
                x = block(x, attend)
        return self.head(self.norm(x[:, 0]))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = FoodViT(checkpointed=args.variant is None)
    gen = torch.Generator(DEVICE).manual_seed(1)
    photos = torch.randn(BANK, 3, IMG, IMG, device=DEVICE, generator=gen)
    labels = torch.randint(0, CLASSES, (BANK,), device=DEVICE, generator=gen)
    order = torch.randperm(BANK, device=DEVICE, generator=gen)
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        idx = order[(i * BATCH) % BANK:(i * BATCH) % BANK + BATCH]
        with bf16():
            return F.cross_entropy(model(photos[idx]), labels[idx])

    train("food_vit_grad_checkpointing", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
