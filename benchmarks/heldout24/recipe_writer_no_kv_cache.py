"""Recipe writing: a GPT-style decoder continues 16 ingredient lists of 384 tokens by 24 greedy tokens, without a KV cache.

Decoder of 6 pre-norm layers of width 1,024 (16 heads of 64, learned positions, SDPA with
`is_causal=True`, GELU MLPs, 32,000-token vocabulary, bf16, inference); the head is applied to the
last position only, in both variants. One `generate()` call per step.
Baseline: the hand-written `generate()` keeps no keys and values: for every new token it runs the
whole decoder over the whole sequence so far (384 to 407 positions), so each of the 24 tokens
recomputes every earlier position's projections, attention and MLP: ~152 k token-passes through the
decoder per step where ~6.5 k would do.
Variant `kv_cache`: a static cache of keys and values per layer (allocated once for 416 positions):
one forward over the prompt fills it, then each new token runs the decoder on that token alone
and attends to the cached keys and values; the same greedy tokens.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("kv_cache",)
BATCH, PROMPT, NEW = (16, 384, 24) if CUDA else (2, 12, 4)
DIM, HEADS, LAYERS, VOCAB = (1024, 16, 6, 32_000) if CUDA else (64, 4, 2, 500)
HD = DIM // HEADS
MAX_LEN = PROMPT + NEW + 8
DTYPE = torch.bfloat16 if CUDA else torch.float32
KV = tuple[torch.Tensor, torch.Tensor]  # one layer's cached keys and values, (B, H, MAX_LEN, HD) each


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, cache: KV | None, start: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        if cache is not None:
            kc, vc = cache
            kc[:, :, start:start + t] = k
            vc[:, :, start:start + t] = v
        if t > 1:  # the whole sequence (or the prompt) at once
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # one new token against every cached position
            assert cache is not None
            a = F.scaled_dot_product_attention(q, cache[0][:, :, :start + 1], cache[1][:, :, :start + 1])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class RecipeLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def next_token(self, ids: torch.Tensor, caches: list[KV] | None, start: int) -> torch.Tensor:
        """Greedy next token after `ids`, which sit at positions start.. of the sequence."""
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.shape[1], device=ids.device))
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i], start)
        return self.head(self.norm(x[:, -1])).argmax(-1)


def generate_recompute(model: RecipeLM, prompt: torch.Tensor) -> torch.Tensor:
    seq = prompt
    for _ in range(NEW):
        nxt = model.next_token(seq, None, 0)
        seq = torch.cat([seq, nxt[:, None]], 1)
    return seq[:, PROMPT:]


def generate_cached(model: RecipeLM, prompt: torch.Tensor, caches: list[KV]) -> torch.Tensor:
    out = [model.next_token(prompt, caches, 0)]
    for t in range(1, NEW):
        out.append(model.next_token(out[-1][:, None], caches, PROMPT + t - 1))
    return torch.stack(out, 1)


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = RecipeLM().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (BATCH, PROMPT), generator=gen, device=DEVICE) for _ in range(3)]
    caches = [(torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=DTYPE),
               torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=DTYPE)) for _ in range(LAYERS)]
    total = torch.zeros((), device=DEVICE, dtype=torch.int64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            prompt = prompts[i % len(prompts)]
            if args.variant == "kv_cache":
                new = generate_cached(model, prompt, caches)
            else:
                new = generate_recompute(model, prompt)
            total += new.sum()
            timer.end()
    timer.report(f"recipe_writer_no_kv_cache variant={args.variant or 'baseline'} token checksum {total.item()}")


if __name__ == "__main__":
    main()
