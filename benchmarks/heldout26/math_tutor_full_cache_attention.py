"""Math-tutor chat decoding whose attention reads the whole 8,192-position static KV cache at every token.

A GPT-style tutor model (12 pre-norm layers of width 1,024, 16 heads of 64, GELU MLPs of 4,096,
learned positions up to 8,192, 32,000-token vocabulary, bf16) answers 32 student conversations at
once. Each conversation is truncated to its last 1,024 tokens and prefilled once, before the timed
loop, into a static KV cache allocated for the model's full context (8,192 positions per layer, as
static caches are sized); every step then decodes 8 greedy tokens for all 32 conversations, one
token at a time (a one-token forward per layer, its key and value written into the cache at the
current position).

Baseline: the decode attention is `F.scaled_dot_product_attention(q, k_cache, v_cache,
attn_mask=positions <= pos)`: every token attends over all 8,192 cache positions with a boolean
mask hiding the ~7,000 empty ones, so each layer reads 1.07 GB of keys and values per token instead
of the ~0.14-0.16 GB that are filled (12.9 GB per token over the 12 layers instead of ~1.8 GB), and
the mask rules out the flash kernel.

Variant `filled_prefix_only`: the attention gets the filled prefix, `k_cache[:, :, :pos + 1]` and
`v_cache[:, :, :pos + 1]`, with no mask (a one-token query attends to every earlier position). The
same weights, cache contents and scores; the masked positions weighed exactly zero (flash instead of
the memory-efficient kernel: last bf16 bits; a near-tie can change a token and what follows it).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("filled_prefix_only",)
if CUDA:
    LAYERS, DIM, HEADS, VOCAB, CAPACITY, CHATS, CONTEXT, TOKENS = 12, 1024, 16, 32_000, 8192, 32, 1024, 8
else:  # a tiny CPU check of the script
    LAYERS, DIM, HEADS, VOCAB, CAPACITY, CHATS, CONTEXT, TOKENS = 2, 64, 4, 128, 96, 2, 16, 4
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Layer(nn.Module):
    """Pre-norm attention with a static per-layer KV cache, and a GELU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        shape = (CHATS, HEADS, CAPACITY, DIM // HEADS)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=DTYPE), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=DTYPE), persistent=False)

    def forward(self, x: torch.Tensor, pos: int, mask: torch.Tensor | None, prefix: bool) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        if t > 1:  # the prefill (pos == 0): causal attention over the prompt
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif prefix:  # variant: the filled part of the cache only
            a = F.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1], self.v_cache[:, :, :pos + 1])
        else:  # baseline: the whole cache, empty positions masked out
            a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Tutor(nn.Module):
    """Token and position embeddings, the layers, final norm and the (untied) vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(CAPACITY, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("positions", torch.arange(CAPACITY), persistent=False)

    def forward(self, ids: torch.Tensor, pos: int, prefix: bool) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos.weight[pos:pos + t]
        mask = None if t > 1 or prefix else (self.positions <= pos).view(1, 1, 1, CAPACITY)  # for every chat and head
        for layer in self.layers:
            x = layer(x, pos, mask, prefix)
        return self.head(self.norm(x[:, -1]))  # logits of the last position


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    prefix = args.variant == "filled_prefix_only"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Tutor().to(DTYPE).eval()
    gen = torch.Generator(DEVICE).manual_seed(1)
    context = torch.randint(0, VOCAB, (CHATS, CONTEXT), generator=gen, device=DEVICE)
    if CONTEXT + args.steps * TOKENS > CAPACITY:
        raise SystemExit(f"the cache holds {CAPACITY} positions: at most {(CAPACITY - CONTEXT) // TOKENS} steps")

    with torch.inference_mode():
        logits = model(context, 0, prefix)  # prefill, before the timed loop
        token = logits.argmax(-1, keepdim=True)
        pos = CONTEXT
        top_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                logits = model(token, pos, prefix)
                best = logits.float().max(-1)
                top_sum += best.values.sum()
                token = best.indices.unsqueeze(1)
                pos += 1
            timer.end()
    mean_top = top_sum.item() / (args.steps * TOKENS * CHATS)
    timer.report(f"math_tutor_full_cache_attention variant={args.variant or 'baseline'} "
                 f"{args.steps * TOKENS} tokens x {CHATS} chats, mean top logit {mean_top:.4f}")


if __name__ == "__main__":
    main()
