"""Greedy generation that re-runs the whole sequence through the decoder for every new token (no KV cache).

A GPT-style decoder (8 pre-norm layers, width 2048, 16 heads of 128, GELU MLP 8192, vocab 32k, bf16
weights, inference mode); each step generates 32 tokens for a batch of 8 prompts of 512 tokens:
`logits = model(seq)[:, -1]`, argmax, `torch.cat` the token and go again. Variant `kv_cache`: one
prefill that fills a preallocated per-layer key/value cache of 544 positions, then one position
per token attending to the cache.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("kv_cache",)
DIM, HEADS, LAYERS, BATCH, PROMPT, NEW = (2048, 16, 8, 8, 512, 32) if CUDA else (64, 4, 2, 2, 16, 6)
VOCAB = 32000 if CUDA else 512
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Layer(nn.Module):
    """Pre-norm causal attention + GELU MLP; with `cache` (k, v buffers) and `pos`, writes its keys there."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None, pos: int = 0) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        if cache is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            kc, vc = cache
            kc[:, :, pos:pos + t], vc[:, :, pos:pos + t] = k, v
            if t > 1:  # the prefill: causal over the prompt
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # one new position attends to every cached one
                a = F.scaled_dot_product_attention(q, kc[:, :, :pos + 1], vc[:, :, :pos + 1])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Decoder(nn.Module):
    """Token + learned position embeddings, the layers, a final norm and an untied head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(PROMPT + NEW, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None, pos: int = 0) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i], pos)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = Decoder().to(DEVICE, DTYPE).eval()
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    shape = (BATCH, HEADS, PROMPT + NEW, DIM // HEADS)
    caches = [(torch.empty(shape, device=DEVICE, dtype=DTYPE), torch.empty(shape, device=DEVICE, dtype=DTYPE)) for _ in range(LAYERS)]
    checksum = torch.zeros((), device=DEVICE, dtype=torch.int64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            seq = prompt
            if args.variant == "kv_cache":
                nxt = model(prompt, caches, 0)[:, -1].argmax(-1, keepdim=True)
                seq = torch.cat([seq, nxt], 1)
                for p in range(PROMPT, PROMPT + NEW - 1):
                    nxt = model(nxt, caches, p)[:, -1].argmax(-1, keepdim=True)
                    seq = torch.cat([seq, nxt], 1)
            else:
                for _t in range(NEW):
                    nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
                    seq = torch.cat([seq, nxt], 1)
            checksum += (seq[:, PROMPT:] * torch.arange(1, NEW + 1, device=DEVICE)).sum()
            timer.end()
    timer.report(f"no_kv_cache variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
