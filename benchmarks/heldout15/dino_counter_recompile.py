"""Compiled image-embedding service whose module bumps a Python counter in `forward`: eager after 8 recompiles.

Workload: an image de-duplication / retrieval indexer embedding 256 images per step (8 calls of 32)
with a DINOv2-ViT-S/14-shaped encoder (14 px patches of 224 x 224: 256 patches, a class token and 4
register tokens; 12 pre-norm blocks of width 384, 6 heads of 64, GELU MLP 1536, LayerScale; 22M
weights), bf16, inference mode, wrapped in `torch.compile(model)` (default mode); the output is the
L2-normalised class token. The module keeps a running count for its periodic log line:
`self.images_seen += x.shape[0]` and `if self.images_seen % LOG_EVERY == 0: log(...)` inside
`forward`. Dynamo treats integer attributes of an `nn.Module` as constants, so the guard
`self.images_seen == k` fails on every call and each call recompiles; after `recompile_limit` (8)
recompilations it warns once and runs the frame eagerly from then on (steps 1 onwards), with the
launch overhead and unfused elementwise work of eager mode.

Variant `counter_outside`: the count and the log line move to the serving loop (`forward` no longer
touches the attribute): one graph, reused by every call; the same embeddings.

No extra variant (the baseline is already compiled).
"""

import logging

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    IMG, PATCH, DIM, HEADS, DEPTH, BATCH, CALLS, POOL = 224, 14, 384, 6, 12, 32, 8, 512
else:
    IMG, PATCH, DIM, HEADS, DEPTH, BATCH, CALLS, POOL = 28, 14, 32, 2, 2, 2, 8, 16
REGISTERS, LOG_EVERY = 4, 1_000_000
GRID = IMG // PATCH
DTYPE = torch.bfloat16 if CUDA else torch.float32
log = logging.getLogger("indexer")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM, eps=1e-6), nn.LayerNorm(DIM, eps=1e-6)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.ls1, self.ls2 = nn.Parameter(torch.full((DIM,), 0.1)), nn.Parameter(torch.full((DIM,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.ls1 * self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.ls2 * self.fc2(F.gelu(self.fc1(self.norm2(x))))


class DinoEmbedder(nn.Module):
    def __init__(self, count_inside: bool) -> None:
        super().__init__()
        self.count_inside = count_inside
        self.images_seen = 0
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.register_tokens = nn.Parameter(torch.randn(1, REGISTERS, DIM) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + GRID * GRID, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, eps=1e-6)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W), normalised -> L2-normalised class-token embeddings (B, DIM)."""
        if self.count_inside:
            self.images_seen += images.shape[0]
            if self.images_seen % LOG_EVERY == 0:
                log.info("embedded %d images", self.images_seen)
        b = images.shape[0]
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], 1) + self.pos_embed
        x = torch.cat([x[:, :1], self.register_tokens.expand(b, -1, -1), x[:, 1:]], 1)
        for block in self.blocks:
            x = block(x)
        return F.normalize(self.norm(x)[:, 0].float(), dim=-1)


def main() -> None:
    args = options(__doc__, ("counter_outside",)).parse_args()
    torch.manual_seed(0)
    inside = args.variant != "counter_outside"
    with torch.device(DEVICE):
        model = DinoEmbedder(count_inside=inside).to(DTYPE).eval()
    embed = torch.compile(model)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, IMG, IMG), dtype=torch.uint8, device=DEVICE, generator=gen)
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255

    checksum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            for call in range(CALLS):
                first = ((step * CALLS + call) * BATCH) % POOL
                x = ((pool[first:first + BATCH].float() - mean) / std).to(DTYPE)
                emb = embed(x)
                if not inside:  # the serving loop keeps the count
                    model.images_seen += BATCH
                    if model.images_seen % LOG_EVERY == 0:
                        log.info("embedded %d images", model.images_seen)
                checksum += (emb[1:] * emb[:-1]).sum()
            timer.end()
    timer.report(f"dino_counter_recompile variant={args.variant or 'baseline'} neighbour similarity "
                 f"{checksum.item() / (args.steps * CALLS * (BATCH - 1)):.5f} images {model.images_seen}")


if __name__ == "__main__":
    main()
