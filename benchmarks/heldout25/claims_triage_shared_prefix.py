"""Insurance-claim triage with an LLM whose 1,024-token shared instruction prompt is prefilled again for every claim.

A GPT-style decoder (8 pre-norm layers of width 1,024, 16 heads of 64, learned positions, GELU MLPs of
4,096, 32,000-token vocabulary, bf16, static per-layer KV cache, SDPA) reads a fixed 1,024-token
system prompt (triage instructions and worked examples, the same for every claim), then a claim's
96-token description, and writes a 4-token routing decision greedily. One step handles 16 claims.

Baseline: each step prefills the full prompt, system prompt + claim (16 x 1,120 tokens), so the
system prompt's keys and values are recomputed for every claim in every step: ~3.9 TFLOP of GEMMs and
causal attention over 1,120 positions, 91 % of the tokens being the unchanged system prompt; then 3
one-token decode steps over the cache.

Variant `prefix_cache`: the system prompt is prefilled once, before the first step, into a batch-1
cache (prefix caching / prompt reuse); each step copies those keys and values into the batch's cache
rows (~0.5 GB written), prefills only the 96 claim tokens (attending to the cached prefix and,
causally, to each other), and runs the same decode steps.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

NAME = "claims_triage_shared_prefix"
VARIANTS = ("prefix_cache",)

if CUDA:
    DIM, HEADS, LAYERS, VOCAB, PREFIX, CLAIM, BATCH, GEN = 1024, 16, 8, 32000, 1024, 96, 16, 4
else:  # tiny check of the script on the CPU
    DIM, HEADS, LAYERS, VOCAB, PREFIX, CLAIM, BATCH, GEN = 64, 4, 2, 256, 32, 8, 2, 3
HD = DIM // HEADS
CTX = PREFIX + CLAIM + GEN
POOL = 4


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, start: int) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        kc[:, :, start:start + n] = k
        vc[:, :, start:start + n] = v
        if start == 0:  # prefill from the first position
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif n == 1:  # one decoded token: every cached position is visible
            a = F.scaled_dot_product_attention(q, kc[:, :, :start + 1], vc[:, :, :start + 1])
        else:  # a suffix after a cached prefix: causal within the suffix, all of the prefix visible
            mask = torch.ones(n, start + n, dtype=torch.bool, device=x.device).tril(start)
            a = F.scaled_dot_product_attention(q, kc[:, :, :start + n], vc[:, :, :start + n], attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(CTX, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, start: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Runs ids at positions start.. and fills the caches there; returns the last position's logits."""
        x = self.tok(ids) + self.pos.weight[start:start + ids.shape[1]]
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer(x, kc, vc, start)
        return self.head(self.norm(x[:, -1]))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = Decoder().to(dtype).eval()
    caches = [(torch.empty(BATCH, HEADS, CTX, HD, dtype=dtype, device=DEVICE),
               torch.empty(BATCH, HEADS, CTX, HD, dtype=dtype, device=DEVICE)) for _ in range(LAYERS)]

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    system = torch.randint(0, VOCAB, (PREFIX,), generator=gen, device=DEVICE)
    claims = torch.randint(0, VOCAB, (POOL, BATCH, CLAIM), generator=gen, device=DEVICE)

    prefix: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.inference_mode():
        if args.variant == "prefix_cache":  # once, before the first step
            prefix = [(torch.empty(1, HEADS, PREFIX, HD, dtype=dtype, device=DEVICE),
                       torch.empty(1, HEADS, PREFIX, HD, dtype=dtype, device=DEVICE)) for _ in range(LAYERS)]
            model(system[None], 0, prefix)

        token_sum = torch.zeros((), dtype=torch.int64, device=DEVICE)
        top_logit = torch.zeros((), dtype=torch.float64, device=DEVICE)
        timer = StepTimer()
        for i in range(args.steps):
            timer.tick()
            claim = claims[i % POOL]
            if args.variant == "prefix_cache":
                for (kc, vc), (pk, pv) in zip(caches, prefix, strict=True):
                    kc[:, :, :PREFIX] = pk
                    vc[:, :, :PREFIX] = pv
                logits = model(claim, PREFIX, caches)
            else:
                logits = model(torch.cat([system.expand(BATCH, -1), claim], 1), 0, caches)
            top_logit += logits.max(-1).values.double().mean()
            nxt = logits.argmax(-1)
            token_sum += nxt.sum()
            for t in range(GEN - 1):
                nxt = model(nxt[:, None], PREFIX + CLAIM + t, caches).argmax(-1)
                token_sum += nxt.sum()
            timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} token sum {token_sum.item()} "
                 f"first-token max-logit mean {top_logit.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
