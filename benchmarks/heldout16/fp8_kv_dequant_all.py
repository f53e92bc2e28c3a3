"""Long-context decoding with an FP8 K/V cache that is concatenated and dequantised whole at every token.

Workload: batched greedy decoding through two Llama-2-13B-shaped layers (width 5120, 40 heads of 128
with their own keys and values, RMSNorm, rotary positions, SwiGLU 13,824) and a 32,000-token head
(0.96B weights, bf16, inference mode): 8 sequences with 6,144-token prompts prefilled at start-up, 4
tokens per step. The K/V cache is quantised to float8 (e4m3) with a per-tensor scale frozen after
the prefill, as transformers 5's `Fp8QuantizedLayer` (`QuantizedCache` backend "fp8") keeps it, and
updated the same way: at every token each layer quantises the new key / value, appends it with
`torch.cat` (a copy of the whole FP8 cache), and dequantises the whole cache for attention as
`(q.float() * scale).to(bfloat16)`, through a float32 copy: per layer and token ~250 MB of FP8 cache
per tensor become ~4 GB of traffic for keys and as much for values, before SDPA reads the 1 GB of
bf16 keys and values it needs.

Variant `bf16_static_cache`: a preallocated bf16 cache (the layout of a static cache) that holds the
same FP8-rounded values, each dequantised once, when its token is written; attention reads
`cache[:, :, :length]` directly. The same keys, values, logits and tokens; the cache takes 2 GB
instead of 1 GB, which the 80 GB card has.

No extra variant (the baseline's cache grows every token).
"""

import math
from functools import partial

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, PROMPT, NEW_TOKENS = 5120, 40, 2, 13824, 32000, 8, 6144, 4
else:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, PROMPT, NEW_TOKENS = 64, 4, 2, 128, 500, 2, 32, 4
HEAD_DIM = DIM // HEADS
FP8, FP8_MAX = torch.float8_e4m3fn, torch.finfo(torch.float8_e4m3fn).max
DTYPE = torch.bfloat16 if CUDA else torch.float32


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`Fp8QuantizedLayer._quantize` with a given scale (clamped: e4m3 has no infinity)."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`Fp8QuantizedLayer._dequantize`: through float32, back to the model's dtype."""
    return (q.float() * scale).to(DTYPE)


class Fp8Cache:
    """transformers 5's FP8 cache layer: per-tensor scales frozen at the prefill, new states appended with
    `torch.cat`, the whole cache dequantised on every update."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k_scale = (k.abs().amax().float() / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        self.v_scale = (v.abs().amax().float() / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        self.k, self.v = quantize(k, self.k_scale), quantize(v, self.v_scale)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = torch.cat([self.k, quantize(k, self.k_scale)], dim=-2)
        self.v = torch.cat([self.v, quantize(v, self.v_scale)], dim=-2)
        return dequantize(self.k, self.k_scale), dequantize(self.v, self.v_scale)


class StaticCache:
    """The same FP8-rounded values held dequantised in a preallocated bf16 buffer, written once per token."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, capacity: int) -> None:
        ref = Fp8Cache(k, v)  # the same scales and rounding
        self.k_scale, self.v_scale = ref.k_scale, ref.v_scale
        b, h, t, d = k.shape
        self.k = torch.zeros(b, h, capacity, d, device=k.device, dtype=DTYPE)
        self.v = torch.zeros_like(self.k)
        self.k[:, :, :t], self.v[:, :, :t] = dequantize(ref.k, self.k_scale), dequantize(ref.v, self.v_scale)
        self.length = t

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = k.shape[2]
        self.k[:, :, self.length:self.length + n] = dequantize(quantize(k, self.k_scale), self.k_scale)
        self.v[:, :, self.length:self.length + n] = dequantize(quantize(v, self.v_scale), self.v_scale)
        self.length += n
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate, self.up, self.down = nn.Linear(DIM, FF, bias=False), nn.Linear(DIM, FF, bias=False), nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, cache_cls) -> tuple[torch.Tensor, object]:
        b, t, _ = x.shape
        h = self.n1(x)
        q, k, v = (p(h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = (torch.cat([-y[..., HEAD_DIM // 2:], y[..., :HEAD_DIM // 2]], -1) * sin + y * cos for y in (q, k))
        if cache is None:  # prefill: attend over the prompt's own states, then quantise them into the cache
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            cache = cache_cls(k, v)
        else:
            k_all, v_all = cache.update(k, v)
            a = F.scaled_dot_product_attention(q, k_all, v_all)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), cache


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, start: int, caches: list, cache_cls) -> torch.Tensor:
        t = ids.shape[1]
        inv = 1.0 / 10000.0 ** (torch.arange(0, HEAD_DIM, 2, device=ids.device, dtype=torch.float32) / HEAD_DIM)
        ang = torch.arange(start, start + t, device=ids.device, dtype=torch.float32)[:, None] * inv[None]
        cos, sin = (torch.cat([f(ang)] * 2, -1).to(DTYPE) for f in (torch.cos, torch.sin))
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x, caches[i] = layer(x, cos, sin, caches[i], cache_cls)
        return self.head(self.norm(x[:, -1]))


def main() -> None:
    args = options(__doc__, ("bf16_static_cache",)).parse_args()
    capacity = PROMPT + NEW_TOKENS * args.steps
    cache_cls = partial(StaticCache, capacity=capacity) if args.variant == "bf16_static_cache" else Fp8Cache
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=gen)
    caches: list = [None] * LAYERS

    with torch.inference_mode():
        logits = model(prompt, 0, caches, cache_cls)
        pos = PROMPT
        tokens = torch.zeros((), device=DEVICE, dtype=torch.long)
        max_logit = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(NEW_TOKENS):
                nxt = logits.argmax(-1)
                tokens += nxt.sum()
                max_logit += logits.float().amax(-1).sum().double()
                logits = model(nxt[:, None], pos, caches, cache_cls)
                pos += 1
            timer.end()
    timer.report(f"fp8_kv_dequant_all variant={args.variant or 'baseline'} token checksum {tokens.item()} "
                 f"max-logit sum {max_logit.item():.4f}")


if __name__ == "__main__":
    main()
