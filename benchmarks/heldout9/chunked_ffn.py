"""BERT-style sequence-classifier fine-tuning with the feed-forward applied in 16-token chunks (`chunk_size_feed_forward`).

Baseline: a post-norm BERT-style encoder (token (30,522 x 1024), position and type embeddings,
LayerNorm; 6 layers of width 1024, 16 heads of 64, SDPA, GELU feed-forward 4096; [CLS] pooler,
2 classes), 16 x 512 tokens, bf16 autocast, fused AdamW. The feed-forward goes through a
transformers-style `apply_chunking_to_forward(ff, chunk_size=16, chunk_dim=1, x)` (the
`chunk_size_feed_forward` memory option): 32 chunks of 16 x 16 = 256 rows per layer, each a pair of
256 x 4096 x 1024 GEMMs, a GELU and a `torch.cat`; backward splits the gradient and runs 32
chunks again. Variant `no_chunking`: `chunk_size_feed_forward = 0` (one 8,192-row feed-forward per
layer; the same weights and results).
"""

import runpy
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer, adamw, bf16 = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer", "adamw", "bf16"))


def apply_chunking_to_forward(fn: Callable[[torch.Tensor], torch.Tensor], chunk_size: int, chunk_dim: int, x: torch.Tensor) -> torch.Tensor:
    """As transformers' helper: split along `chunk_dim` into chunks of `chunk_size`, apply, concatenate."""
    if chunk_size > 0:
        n = x.shape[chunk_dim] // chunk_size
        return torch.cat([fn(c) for c in x.chunk(n, dim=chunk_dim)], dim=chunk_dim)
    return fn(x)


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, chunk: int) -> None:
        super().__init__()
        self.heads, self.chunk = heads, chunk
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def ff(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(h)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + apply_chunking_to_forward(self.ff, self.chunk, 1, x))


class Bert(nn.Module):
    def __init__(self, vocab: int, ctx: int, dim: int, heads: int, layers: int, chunk: int) -> None:
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim), nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(Layer(dim, heads, chunk) for _ in range(layers))
        self.pool, self.cls = nn.Linear(dim, dim), nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.typ.weight[0])
        for layer in self.layers:
            x = layer(x)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


def main() -> None:
    args = options(__doc__, ("no_chunking",)).parse_args()
    torch.manual_seed(0)
    # GPU: 16 x 512 tokens, width 1024, 6 layers, chunks of 16; CPU check: 2 x 16 tokens, width 32, chunks of 4
    batch, seq, dim, heads, layers, vocab, chunk = (16, 512, 1024, 16, 6, 30522, 16) if CUDA else (2, 16, 32, 4, 2, 300, 4)
    model = Bert(vocab, seq, dim, heads, layers, 0 if args.variant == "no_chunking" else chunk).to(DEVICE)
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    data = [(torch.randint(0, vocab, (batch, seq), device=DEVICE, generator=g),
             torch.randint(0, 2, (batch,), device=DEVICE, generator=g)) for _ in range(4)]

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        ids, y = data[i % 4]
        with bf16():
            loss = F.cross_entropy(model(ids).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"chunked_ffn variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
