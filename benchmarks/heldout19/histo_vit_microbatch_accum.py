"""ViT-S/16 tissue classifier fine-tuned with gradient accumulation over micro-batches of 8.

Colorectal-histology tile classification (9 tissue classes, 224 x 224 H&E-like tiles, ViT-S/16:
196 patches + a class token, 12 pre-norm blocks of width 384 with 6 heads; bf16 autocast, fused
AdamW). The effective batch is 64 images per optimizer step, reached the way the training
recipe copied from a large-model run on a small card does it: 8 micro-batches of 8, each with its
own forward and backward, loss divided by 8, one optimizer step after the eighth. Each micro-batch
is 1,576 tokens: GEMMs too small to fill an H100 and ~500 kernel launches per micro-batch, so the
step is 8 small, launch-bound passes.

  baseline            8 micro-batches of 8 per optimizer step (accumulated gradients)
  --variant full_batch     the 64 images in one forward and backward (memory allows it)

Same images, weights and the same mean loss over 64 images (no BatchNorm, no dropout); the summed
gradients round differently.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, adamw, bf16, options
from torch import nn

CLASSES, PATCH = 9, 16
if CUDA:
    IMAGES, MICRO, SIZE, WIDTH, HEADS, LAYERS = 64, 8, 224, 384, 6, 12
else:
    IMAGES, MICRO, SIZE, WIDTH, HEADS, LAYERS = 8, 2, 32, 32, 4, 2
TOKENS = (SIZE // PATCH) ** 2 + 1


class ViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos = nn.Parameter(torch.randn(1, TOKENS, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(WIDTH, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x, F.scaled_dot_product_attention)
        return self.head(self.norm(x[:, 0]))


def tiles(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of stain-like tiles: class-dependent hue and texture frequency, noise (normalised)."""
    y = torch.randint(0, CLASSES, (IMAGES,), generator=g, device=DEVICE)
    yy = torch.linspace(-1, 1, SIZE, device=DEVICE)
    freq = 2.0 + y.float()[:, None, None] * 1.5
    phase = torch.rand(IMAGES, 1, 1, generator=g, device=DEVICE) * 6.28
    texture = torch.sin(freq * (yy[None, :, None] * 3 + yy[None, None, :] * 2) + phase)
    hue = torch.stack([0.6 + 0.03 * y, 0.3 + 0.02 * y, 0.7 - 0.04 * y], 1).float()[:, :, None, None]
    img = hue * (1 + 0.3 * texture[:, None]) + 0.2 * torch.randn(IMAGES, 3, SIZE, SIZE, generator=g, device=DEVICE)
    return (img - 0.5) / 0.25, y


def main() -> None:
    args = options(__doc__, ("full_batch",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ViT()
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    accum = 1 if args.variant == "full_batch" else IMAGES // MICRO

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        img, y = tiles(g)
        opt.zero_grad(set_to_none=True)
        for part_img, part_y in zip(img.chunk(accum), y.chunk(accum), strict=True):
            with bf16():
                logits = model(part_img)
            loss = F.cross_entropy(logits.float(), part_y) / accum
            loss.backward()
            total += loss.detach()
        opt.step()
        timer.end()
    timer.report(f"histo_vit_microbatch_accum variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
