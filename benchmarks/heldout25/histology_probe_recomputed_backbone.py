"""Histology tile classifier: a trainable attention probe on a frozen ViT-B/16 whose features are recomputed every step.

Tissue-type classification of colorectal-cancer H&E tiles (CRC-100K-style, 9 classes) with a frozen
pathology foundation model (a ViT-B/16-shaped encoder: 224 x 224 tiles, 196 patches + CLS, 12 blocks of
width 768, 12 heads, SDPA, bf16, eval) and a trainable probe on its token features (2 pre-norm
attention blocks of width 768, LayerNorm, mean pool, a linear classifier; fp32 weights, bf16 autocast,
fused AdamW). The training set is 4 pre-shuffled batches of 128 tiles, visited in order, epoch after
epoch, without augmentation.

Baseline: every step runs the frozen encoder (under `torch.no_grad()`) on its batch again, although
the encoder never changes and the tiles are the same each epoch: ~4.5 TFLOP of bf16 forward work
per step for features that were already computed one epoch earlier.

Variant `cached_features`: the encoder runs once per batch before training (the "fast feature
extraction" recipe: extract the frozen features once, train the head on the stored features); each
step reads its batch's stored features (155 MB for the 4 batches). The same features (the same
batch shapes, so the same kernels), the same head, the same updates.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train
from torch import nn

NAME = "histology_probe_recomputed_backbone"
VARIANTS = ("cached_features",)

if CUDA:
    IMG, PATCH, DIM, HEADS, DEPTH, PROBE_DEPTH, BATCH, N_BATCHES = 224, 16, 768, 12, 12, 2, 128, 4
else:  # tiny check of the script on the CPU
    IMG, PATCH, DIM, HEADS, DEPTH, PROBE_DEPTH, BATCH, N_BATCHES = 32, 8, 64, 4, 2, 1, 8, 2
CLASSES = 9
TOKENS = (IMG // PATCH) ** 2 + 1


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class FrozenViT(nn.Module):
    """Patch embedding, CLS token, learned positions, pre-norm blocks, final LayerNorm; token features out."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x, sdpa)
        return self.norm(x)


class Probe(nn.Module):
    """The trainable head: attention blocks over the frozen tokens, mean pool, classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(PROBE_DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.cls = nn.Linear(DIM, CLASSES)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = feats
        for blk in self.blocks:
            x = blk(x, sdpa)
        return self.cls(self.norm(x).mean(1))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        encoder = FrozenViT()
        probe = Probe()
    encoder.eval().requires_grad_(False)
    dtype = torch.bfloat16 if CUDA else torch.float32
    encoder.to(dtype)
    opt = adamw(list(probe.parameters()))

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    tiles = torch.randn(N_BATCHES, BATCH, 3, IMG, IMG, generator=gen, device=DEVICE).to(dtype)
    labels = torch.randint(0, CLASSES, (N_BATCHES, BATCH), generator=gen, device=DEVICE)

    cache: list[torch.Tensor] = []
    if args.variant == "cached_features":
        with torch.no_grad():  # one pass over the training set, before the first step
            cache = [encoder(tiles[b]) for b in range(N_BATCHES)]

    def loss_of(i: int) -> torch.Tensor:
        b = i % N_BATCHES
        if args.variant == "cached_features":
            feats = cache[b]
        else:
            with torch.no_grad():  # frozen, but recomputed for the same tiles every epoch
                feats = encoder(tiles[b])
        with bf16():
            logits = probe(feats)
        return F.cross_entropy(logits.float(), labels[b])

    train(NAME, args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
