"""Few-shot LLM classification that prefills the same 1,024-token instruction prefix for every request.

Workload: an LLM-as-classifier service: a Qwen1.5-1.8B-shaped decoder (4 layers of width 2048, 16
heads of 128 with their own keys and values, q/k/v biases, rotary positions, RMSNorm, SwiGLU 5,504,
untied 151,936-token head; 0.83B weights, bf16, inference mode) reads prompts made of one fixed
1,024-token prefix (the instructions and the few-shot examples, identical in every request) and a
256-token query, and classifies each query by the next-token logits of four label tokens at the
last position. Each step serves 16 requests as one batch of 16 x 1,280 tokens: every request
recomputes the prefix's projections, MLPs and causal attention, so 80 % of the step's 20,480
token-positions (and of its GEMM FLOPs) repeat, 16 times, the same prefix computation, whose keys
and values are the same in every request and every step.

Variant `prefix_cache`: the prefix's keys and values are computed once at start-up (one batch-1
prefill of the 1,024 tokens, kept per layer: 16 MB) and every step prefills only the 16 queries
(positions 1,024..1,279) against them: each layer concatenates the broadcast prefix keys / values
with the query's own and calls SDPA with `causal_lower_right(256, 1280)` (the lower-right-aligned
causal bias of `torch.nn.attention.bias`: every query token sees the whole prefix and the query
tokens before it), as prefix caching does in vLLM (automatic prefix caching), SGLang (RadixAttention)
and Hugging Face's "re-use the cache of a system prompt" recipe. The same label logits up to the
rounding of batch-1 against batch-16 GEMMs.

No extra variant.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.nn.attention.bias import causal_lower_right

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, PREFIX, QUERY, REQUESTS, POOL = 2048, 16, 4, 5504, 151936, 1024, 256, 16, 64
else:
    DIM, HEADS, LAYERS, FF, VOCAB, PREFIX, QUERY, REQUESTS, POOL = 64, 4, 2, 128, 1000, 48, 16, 4, 8
HEAD_DIM = DIM // HEADS
LABEL_TOKENS = (362, 425, 356, 422)  # " A", " B", " C", " D"
DTYPE = torch.bfloat16 if CUDA else torch.float32
KV = tuple[torch.Tensor, torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.q, self.k, self.v = (nn.Linear(DIM, DIM) for _ in range(3))
        self.o = nn.Linear(DIM, DIM, bias=False)
        self.gate, self.up, self.down = nn.Linear(DIM, FF, bias=False), nn.Linear(DIM, FF, bias=False), nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        b, t, _ = x.shape
        h = self.n1(x)
        q, k, v = (p(h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if past is None:  # the whole prompt: plain causal attention
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # query tokens after the cached prefix
            pk, pv = past
            k_all = torch.cat([pk.expand(b, -1, -1, -1), k], 2)
            v_all = torch.cat([pv.expand(b, -1, -1, -1), v], 2)
            a = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=causal_lower_right(t, k_all.shape[2]))
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), (k, v)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, start: int, past: list[KV] | None = None) -> tuple[torch.Tensor, list[KV]]:
        """ids (B, T) at positions start .. start + T - 1 -> last-position logits (B, VOCAB), per-layer (k, v)."""
        t = ids.shape[1]
        inv = 1.0 / 1000000.0 ** (torch.arange(0, HEAD_DIM, 2, device=ids.device, dtype=torch.float32) / HEAD_DIM)
        ang = torch.arange(start, start + t, device=ids.device, dtype=torch.float32)[:, None] * inv[None]
        cos, sin = (torch.cat([f(ang)] * 2, -1).to(DTYPE) for f in (torch.cos, torch.sin))
        x = self.embed(ids)
        kvs = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, None if past is None else past[i])
            kvs.append(kv)
        return self.head(self.norm(x[:, -1])), kvs


def main() -> None:
    args = options(__doc__, ("prefix_cache",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    nn.init.normal_(model.embed.weight, std=0.02)
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prefix = torch.randint(0, VOCAB, (1, PREFIX), device=DEVICE, generator=gen)
    queries = torch.randint(0, VOCAB, (POOL, QUERY), device=DEVICE, generator=gen)
    labels = torch.tensor(LABEL_TOKENS, device=DEVICE) % VOCAB

    with torch.inference_mode():
        prefix_kv = model(prefix, 0)[1] if args.variant == "prefix_cache" else None
        prob_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
        label_sum = torch.zeros((), device=DEVICE, dtype=torch.long)
        logit_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for step in range(args.steps):
            timer.tick()
            first = (step * REQUESTS) % POOL
            batch = queries[first:first + REQUESTS]
            if prefix_kv is None:  # every request's full prompt
                logits, _ = model(torch.cat([prefix.expand(REQUESTS, -1), batch], 1), 0)
            else:
                logits, _ = model(batch, PREFIX, prefix_kv)
            label_logits = logits[:, labels].float()
            probs = label_logits.softmax(-1)
            logit_sum += label_logits.sum()
            prob_sum += probs.amax(-1).sum()
            label_sum += probs.argmax(-1).sum()
            timer.end()
    timer.report(f"fewshot_prefix_recompute variant={args.variant or 'baseline'} mean label probability "
                 f"{prob_sum.item() / (args.steps * REQUESTS):.5f} label sum {label_sum.item()} "
                 f"label-logit sum {logit_sum.item():.4f}")


if __name__ == "__main__":
    main()
