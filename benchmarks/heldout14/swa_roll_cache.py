"""Sliding-window decoding whose K/V window is rolled one slot per token (Hugging Face's `SlidingWindowCache`).

Workload: batched greedy generation with a Mistral-style sliding-window decoder (4 layers of width
2048, 16 heads of 128 with their own K/V, RMSNorm, rotary, SwiGLU 5632, 32,000-token head; bf16,
inference mode, attention window 4,096), 16 sequences whose 4,096-token prompts were prefilled into
a full window (K and V caches of 16 x 16 x 4,096 x 128 per layer, 537 MB a layer), then 4 tokens per
step. Each layer updates its window as `SlidingWindowCache.update` does: the shift indices are built
from `ones(window).cumsum(0)`, the clamped cache position and a compare; `k_out = k_cache[:, :,
indices]` gathers the whole window one slot to the left, the new K/V is written into the last slot,
then `k_cache.zero_()` and `k_cache += k_out` store it back; SDPA attends over `k_out` / `v_out`.
That is six passes over the window per layer and token where attention reads it once.

Variant `ring_buffer`: the window is a ring: the new K/V is written in place at slot `pos % window`
(one `index_copy_`), and SDPA attends over the buffer as it lies. Keys carry their rotary position
from before they were cached and nothing is masked, so the order of the keys does not change the
attention output (up to the summation order inside the kernel).

Variant `cuda_graph` (extra, timed but not recorded): the baseline's per-token step (the roll, the
layers, argmax and the token and position write-back) captured once in a CUDA graph and replayed per
token. Without CUDA it runs eagerly.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, WINDOW, TOKENS = 2048, 16, 4, 5632, 32000, 16, 4096, 4
else:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, WINDOW, TOKENS = 64, 4, 2, 128, 256, 2, 32, 4
HEAD_DIM = DIM // HEADS
MAX_POS = WINDOW + 64 * TOKENS + 64
DTYPE = torch.bfloat16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


def roll_update(cache: torch.Tensor, new: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
    """`SlidingWindowCache.update` for one tensor of a full window: shift left by one, write the new
    entry into the last slot, store back with zero_() and +=; returns the shifted window."""
    slicing = torch.ones(WINDOW, dtype=torch.long, device=new.device).cumsum(0)
    cache_position = cache_position.clamp(0, WINDOW - 1)
    to_shift = cache_position >= WINDOW - 1
    indices = (slicing + to_shift[-1].int() - 1) % WINDOW
    out = cache[:, :, indices]
    out[:, :, cache_position] = new
    cache.zero_()
    cache += out
    return out


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(DIM, FF, bias=False), nn.Linear(DIM, FF, bias=False)
        self.down = nn.Linear(FF, DIM, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = (proj(h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2) for proj in (self.q, self.k, self.v))
        return rope(q, cos, sin), rope(k, cos, sin), v

    def finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = a.shape
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class SlidingDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        freqs = torch.outer(torch.arange(MAX_POS, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat([freqs, freqs], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([freqs, freqs], -1).sin(), persistent=False)

    def prefill(self, ids: torch.Tensor, k_cache: list[torch.Tensor], v_cache: list[torch.Tensor]) -> torch.Tensor:
        """The prompt (exactly one window long) with causal attention; fills the caches; last logits."""
        x = self.embed(ids)
        cos, sin = self.cos[: ids.shape[1]].to(x.dtype), self.sin[: ids.shape[1]].to(x.dtype)
        for layer, kc, vc in zip(self.layers, k_cache, v_cache, strict=True):
            q, k, v = layer.qkv(x, cos, sin)
            kc.copy_(k)
            vc.copy_(v)
            x = layer.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.head(self.norm(x[:, -1]))

    def decode(self, token: torch.Tensor, pos: torch.Tensor, k_cache: list[torch.Tensor],
               v_cache: list[torch.Tensor], ring: bool) -> torch.Tensor:
        """One token per sequence at absolute position `pos` (a 1-element device tensor); logits."""
        x = self.embed(token)[:, None]
        cos, sin = self.cos[pos].to(x.dtype), self.sin[pos].to(x.dtype)
        slot = pos % WINDOW
        for layer, kc, vc in zip(self.layers, k_cache, v_cache, strict=True):
            q, k, v = layer.qkv(x, cos, sin)
            if ring:
                kc.index_copy_(2, slot, k)
                vc.index_copy_(2, slot, v)
                keys, values = kc, vc
            else:
                keys, values = roll_update(kc, k, pos), roll_update(vc, v, pos)
            x = layer.finish(x, F.scaled_dot_product_attention(q, keys, values))
        return self.head(self.norm(x[:, 0]))


def main() -> None:
    args = options(__doc__, ("ring_buffer", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SlidingDecoder()
    for layer in model.layers:
        for lin in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down):
            nn.init.normal_(lin.weight, std=1.0 / math.sqrt(lin.in_features))
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prompt = torch.randint(0, VOCAB, (BATCH, WINDOW), device=DEVICE, generator=gen)
    shape = (BATCH, HEADS, WINDOW, HEAD_DIM)
    k_cache = [torch.zeros(shape, device=DEVICE, dtype=DTYPE) for _ in range(LAYERS)]
    v_cache = [torch.zeros(shape, device=DEVICE, dtype=DTYPE) for _ in range(LAYERS)]
    ring = args.variant == "ring_buffer"
    assert args.steps * TOKENS + WINDOW < MAX_POS

    with torch.inference_mode():
        token = model.prefill(prompt, k_cache, v_cache).argmax(-1)
        pos = torch.full((1,), WINDOW, dtype=torch.long, device=DEVICE)

        def decode_one() -> None:
            token.copy_(model.decode(token, pos, k_cache, v_cache, ring).argmax(-1))
            pos.add_(1)

        step_fn = decode_one
        if args.variant == "cuda_graph" and CUDA:
            # warm up on a side stream on copies of the state, then capture one token on the real state
            saved = [t.clone() for t in (*k_cache, *v_cache, token, pos)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    decode_one()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                decode_one()
            for dst, src in zip((*k_cache, *v_cache, token, pos), saved, strict=True):
                dst.copy_(src)
            step_fn = graph.replay

        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                step_fn()
                checksum += token.sum()
            timer.end()
    timer.report(f"swa_roll_cache variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
