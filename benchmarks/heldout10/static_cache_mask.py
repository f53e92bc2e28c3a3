"""Batched greedy decoding over a preallocated (static) KV cache of 8,192 positions, attending over the whole cache with a padding mask.

The usual suspect: attention. A GPT-style decoder (8 pre-norm layers, width 1024, 8 heads of 128,
GELU MLP 4096, learned positions, 32,000-token head), bf16, inference mode; 16 prompts of 1,024
tokens prefilled once into a static K/V cache sized for 8,192 positions (as a `StaticCache`-style
cache or a fixed `max_seq_len` cache allocates it); each step decodes 16 greedy tokens after the
prompt. Baseline: every layer calls `scaled_dot_product_attention(q, k_cache, v_cache,
attn_mask=positions <= pos)` over all 8,192 cached positions (7,150+ of them empty and masked).
Variant `filled_prefix`: attention over `k_cache[:, :, :pos + 1]` with no mask (the same keys; the
masked ones only ever added zero weight).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("filled_prefix",)
if CUDA:
    LAYERS, WIDTH, HEADS, VOCAB, BATCH, PROMPT, MAX_LEN, NEW = 8, 1024, 8, 32000, 16, 1024, 8192, 16
else:
    LAYERS, WIDTH, HEADS, VOCAB, BATCH, PROMPT, MAX_LEN, NEW = 2, 64, 4, 512, 2, 24, 256, 4
DTYPE = torch.bfloat16 if CUDA else torch.float32
HD = WIDTH // HEADS


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.o = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
        self.k_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=DTYPE)
        self.v_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=DTYPE)

    def forward(self, x: torch.Tensor, pos: int, mask: torch.Tensor | None, prefix: bool) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        if t > 1:  # the prefill: causal attention over the prompt
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif prefix:
            a = F.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1], self.v_cache[:, :, :pos + 1])
        else:
            a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(MAX_LEN, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, pos: int, mask: torch.Tensor | None, prefix: bool) -> torch.Tensor:
        positions = torch.arange(pos, pos + ids.shape[1], device=DEVICE)
        x = self.tok(ids) + self.pos(positions)
        for layer in self.layers:
            x = layer(x, pos, mask, prefix)
        return self.head(self.norm(x[:, -1]))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = Decoder().to(DEVICE)
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.normal_(p, 0.0, 1.0 / math.sqrt(p.shape[1]) if p.shape[0] != VOCAB else 0.02)
    model = model.to(DTYPE).eval()  # the caches are plain attributes, made in DTYPE
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    prompts = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=gen)
    prefix = args.variant == "filled_prefix"
    slots = torch.arange(MAX_LEN, device=DEVICE)
    total = 0
    timer = StepTimer()
    with torch.inference_mode():
        first = model(prompts, 0, None, prefix).argmax(-1, keepdim=True)
        for _ in range(args.steps):
            timer.tick()
            tok, out = first, []
            for j in range(NEW):
                pos = PROMPT + j
                mask = None if prefix else (slots <= pos).view(1, 1, 1, MAX_LEN)
                tok = model(tok, pos, mask, prefix).argmax(-1, keepdim=True)
                out.append(tok)
            total += int(torch.cat(out, 1).sum())
            timer.end()
    timer.report(f"static_cache_mask variant={args.variant or 'baseline'} token checksum {total}")


if __name__ == "__main__":
    main()
