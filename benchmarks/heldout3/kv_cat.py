"""Batched greedy decoding with a KV cache grown by `torch.cat` every token in every layer: each step
decodes 16 tokens after a 2048-token prompt whose cache (random keys and values, standing in for a
prefill) is the same every step.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/kv_cat.py
Variants: --variant prealloc (one cache buffer of prompt + 16 positions per layer allocated once,
the new key/value written in place, attention over the filled prefix), --variant grow_blocks (the
cache grown by `torch.cat` in blocks of 256 positions when full, written in place between growths).
On the GPU: 8 layers, width 1024, 16 heads, MLP 4096, vocab 32000, batch 32, bf16 weights, inference
mode, SDPA. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

BLOCK = 256


class Layer(nn.Module):
    """Pre-norm decoder layer for one new token over a cache."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor], pos: int, how: str | None) -> torch.Tensor:
        b, d = x.shape
        q, k, v = (t.view(b, self.heads, 1, d // self.heads) for t in self.qkv(self.n1(x)).split(d, dim=-1))
        if how is None:
            cache["k"] = torch.cat([cache["k"], k], dim=2)
            cache["v"] = torch.cat([cache["v"], v], dim=2)
        else:
            if how == "grow_blocks" and cache["k"].shape[2] <= pos:
                pad = cache["k"].new_zeros(*cache["k"].shape[:2], BLOCK, cache["k"].shape[3])
                cache["k"] = torch.cat([cache["k"], pad], dim=2)
                cache["v"] = torch.cat([cache["v"], pad], dim=2)
            cache["k"][:, :, pos : pos + 1] = k
            cache["v"][:, :, pos : pos + 1] = v
        kk, vv = cache["k"][:, :, : pos + 1], cache["v"][:, :, : pos + 1]
        a = F.scaled_dot_product_attention(q, kk, vv).reshape(b, d)
        x = x + self.o(a)
        return x + self.mlp(self.n2(x))


def main() -> None:
    args = options(__doc__, ("prealloc", "grow_blocks")).parse_args()
    dim, heads, layers, vocab, batch, prompt, new = (1024, 16, 8, 32000, 32, 2048, 16) if CUDA else (32, 4, 2, 100, 2, 8, 4)
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, dim).to(DEVICE, dtype)
    blocks = nn.ModuleList(Layer(dim, heads) for _ in range(layers)).to(DEVICE, dtype)
    norm, head = nn.LayerNorm(dim).to(DEVICE, dtype), nn.Linear(dim, vocab, bias=False).to(DEVICE, dtype)
    shape = (batch, heads, prompt, dim // heads)
    prompt_kv = [(torch.randn(shape, device=DEVICE, dtype=dtype), torch.randn(shape, device=DEVICE, dtype=dtype)) for _ in range(layers)]
    buffers = []
    if args.variant == "prealloc":
        for k, v in prompt_kv:
            bk = torch.empty(batch, heads, prompt + new, dim // heads, device=DEVICE, dtype=dtype)
            bv = torch.empty_like(bk)
            bk[:, :, :prompt], bv[:, :, :prompt] = k, v
            buffers.append((bk, bv))
    first = torch.randint(0, vocab, (batch,), device=DEVICE)
    checksum = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            caches = [{"k": k, "v": v} for k, v in (buffers if args.variant == "prealloc" else prompt_kv)]
            tok = first
            for t in range(new):
                x = emb(tok)
                for layer, cache in zip(blocks, caches, strict=True):
                    x = layer(x, cache, prompt + t, args.variant)
                tok = head(norm(x)).argmax(-1)
                checksum += tok.sum()
            timer.end()
    timer.report(f"kv_cat variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
