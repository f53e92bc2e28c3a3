"""Text-embedding indexing with a CLIP-style dual encoder wrapped in `torch.compile`, called through `encode_text` (which runs eager).

Baseline: a CLIP-style model (a small patch-embedding image tower and a text tower: token + learned
positions, 4 pre-norm causal blocks of width 512, 8 heads, QuickGELU MLP 2048, final LayerNorm, the
end-of-text token's features, a 512 -> 512 projection, L2 normalisation), bf16 weights, inference
mode; `model = torch.compile(model)` as the docs show, then the indexing job calls
`model.encode_text(tokens)`. `torch.compile` compiles `forward` only: the method is looked up on the
original module and every call runs eagerly (no compile happens at all). 8 batches of 256 captions x
77 tokens per step. Variant `compile_encode`: `encode = torch.compile(model.encode_text)` (the method
that is called), one inductor graph of the text tower (expected cold compile ~5-8 s on the GPU
machine, ~2 s from warm caches).
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer"))


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.in_proj, self.out_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), QuickGELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.in_proj(self.ln_1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln_2(x))


class CLIP(nn.Module):
    def __init__(self, vocab: int, ctx: int, dim: int, heads: int, layers: int, embed: int) -> None:
        super().__init__()
        self.visual = nn.Sequential(nn.Conv2d(3, dim, 32, 32), nn.Flatten(2))  # the image tower, unused by this job
        self.visual_proj = nn.Linear(dim, embed, bias=False)
        self.token_embedding = nn.Embedding(vocab, dim)
        self.positional_embedding = nn.Parameter(torch.randn(ctx, dim) * 0.01)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_final = nn.LayerNorm(dim)
        self.text_projection = nn.Linear(dim, embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(4.6052))

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.visual_proj(self.visual(images).mean(-1)), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(tokens) + self.positional_embedding
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_final(x)
        eot = x[torch.arange(x.shape[0], device=x.device), tokens.argmax(dim=-1)]  # EOT has the largest id
        return F.normalize(self.text_projection(eot), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.logit_scale.exp() * self.encode_image(images) @ self.encode_text(tokens).t()


def main() -> None:
    args = options(__doc__, ("compile_encode",)).parse_args()
    torch.manual_seed(0)
    # GPU: 8 batches of 256 captions x 77 tokens, width 512, 4 blocks; CPU check: 2 batches of 4 x 16, width 32
    nbatch, batch, ctx, dim, heads, layers, vocab = (8, 256, 77, 512, 8, 4, 49408) if CUDA else (2, 4, 16, 32, 4, 2, 500)
    dtype = torch.bfloat16 if CUDA else torch.float32
    clip = CLIP(vocab, ctx, dim, heads, layers, dim).to(DEVICE, dtype).eval()
    g = torch.Generator(device=DEVICE).manual_seed(1)
    batches = []
    for _ in range(nbatch):
        tok = torch.randint(1, vocab - 1, (batch, ctx), device=DEVICE, generator=g)
        ends = torch.randint(4, ctx, (batch,), device=DEVICE, generator=g)
        pos = torch.arange(ctx, device=DEVICE)
        tok = torch.where(pos > ends[:, None], 0, tok)  # padding after the caption
        tok[torch.arange(batch, device=DEVICE), ends] = vocab - 1  # end-of-text token
        batches.append(tok)
    query = F.normalize(torch.randn(dim, device=DEVICE, generator=g), dim=0).to(dtype)

    if args.variant == "compile_encode":
        encode = torch.compile(clip.encode_text)  # compile the method the job calls
    else:
        model = torch.compile(clip)  # compiles forward(); encode_text below stays eager
        encode = model.encode_text

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            for tok in batches:
                emb = encode(tok)
                total += (emb @ query).float().sum()
            timer.end()
    timer.report(f"compile_method variant={args.variant or 'baseline'} score checksum {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
