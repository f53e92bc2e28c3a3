"""Video indexing that embeds every frame with a CLIP image tower one frame at a time.

Workload: the indexing job of a text-to-video search service: 2 clips per step, 8 frames sampled from
each (uint8, 224 x 224, on the GPU), each frame normalised with CLIP's mean and std and embedded by a
CLIP ViT-B/16 image tower (OpenAI layout: 16 px patch conv without bias, class embedding, 197 learned
positions, ln_pre, 12 residual attention blocks of width 768 with 12 heads of 64 and a QuickGELU MLP
3072, ln_post on the class token, projection to 512), bf16 weights, `torch.inference_mode()`; a clip's
embedding is the L2-normalised mean of its frames' normalised embeddings, scored against 4 text
queries. The loop calls `model.encode_image(frame[None])` for one frame at a time (16 batch-1
forwards per step).

Variant `batched_frames`: all 16 frames of the step in one `encode_image` call (batch 16), the
embeddings split back per clip; the same per-frame computation.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    IMG, PATCH, WIDTH, HEADS, LAYERS, EMBED, CLIPS, FRAMES = 224, 16, 768, 12, 12, 512, 2, 8
else:
    IMG, PATCH, WIDTH, HEADS, LAYERS, EMBED, CLIPS, FRAMES = 32, 16, 64, 4, 2, 32, 2, 3
DTYPE = torch.bfloat16 if CUDA else torch.float32
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.in_proj, self.out_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), QuickGELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.in_proj(self.ln_1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.out_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        scale = WIDTH**-0.5
        self.conv1 = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH, bias=False)
        self.class_embedding = nn.Parameter(scale * torch.randn(WIDTH))
        self.positional_embedding = nn.Parameter(scale * torch.randn((IMG // PATCH) ** 2 + 1, WIDTH))
        self.ln_pre, self.ln_post = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.resblocks = nn.Sequential(*[ResidualAttentionBlock(WIDTH, HEADS) for _ in range(LAYERS)])
        self.proj = nn.Parameter(scale * torch.randn(WIDTH, EMBED))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x).flatten(2).transpose(1, 2)
        cls = self.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
        x = self.ln_pre(torch.cat([cls, x], 1) + self.positional_embedding.to(x.dtype))
        x = self.resblocks(x)
        return self.ln_post(x[:, 0]) @ self.proj


class CLIPImageEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.visual = VisionTransformer()
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1) * 255, persistent=False)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1) * 255, persistent=False)

    def encode_image(self, frames_u8: torch.Tensor) -> torch.Tensor:
        x = ((frames_u8.float() - self.mean) / self.std).to(self.visual.conv1.weight.dtype)
        return F.normalize(self.visual(x).float(), dim=-1)


def main() -> None:
    args = options(__doc__, ("batched_frames",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = CLIPImageEncoder().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    # a small library of decoded clips (uint8 frames on the GPU) and 4 text-query embeddings
    library = torch.randint(0, 256, (4 * CLIPS, FRAMES, 3, IMG, IMG), dtype=torch.uint8, device=DEVICE, generator=gen)
    queries = F.normalize(torch.randn(4, EMBED, device=DEVICE, generator=gen), dim=-1)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            first = (step * CLIPS) % library.shape[0]
            clips = library[first:first + CLIPS]
            if args.variant == "batched_frames":
                frame_emb = model.encode_image(clips.flatten(0, 1)).view(CLIPS, FRAMES, EMBED)
                clip_emb = F.normalize(frame_emb.mean(1), dim=-1)
            else:
                per_clip = []
                for clip in clips:
                    frame_emb = torch.cat([model.encode_image(frame[None]) for frame in clip])
                    per_clip.append(F.normalize(frame_emb.mean(0), dim=-1))
                clip_emb = torch.stack(per_clip)
            total += (clip_emb @ queries.T).sum()
            timer.end()
    timer.report(f"clip_frame_loop variant={args.variant or 'baseline'} score checksum {total.item():.4f}")


if __name__ == "__main__":
    main()
