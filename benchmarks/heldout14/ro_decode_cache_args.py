"""Greedy decoding with `torch.compile(mode="reduce-overhead")` whose K/V caches are plain tensor arguments.

Workload: batched greedy generation with a small Llama-style decoder (8 layers of width 768, 12 heads
of 64, RMSNorm, rotary, SwiGLU 2048, untied 32,000-token head; bf16, inference mode), 4 sequences,
a 64-token prompt prefilled eagerly into static K/V caches of 1,024 positions (one K and one V
tensor per layer, allocated with `torch.zeros`), then 16 tokens per step. The per-token step
`model.decode(token, pos, k_caches, v_caches)` writes the new K/V with `index_copy_` at `pos` (a
device tensor), attends over the whole cache with a `positions <= pos` mask and returns the argmax;
it is compiled with `torch.compile(model.decode, mode="reduce-overhead")` to get CUDA graphs. The
caches are ordinary inputs of the compiled function that it mutates, so inductor's CUDA-graph trees
skip the graph ("mutated inputs") and every token runs the compiled kernels one launch at a time.

Variant `static_cache`: `torch._dynamo.mark_static_address` on every cache tensor before the first
call (what Hugging Face's `StaticCache` does), so the mutation is on static inputs and each token is
one CUDA-graph replay; the same kernels and values.

No extra variant (the baseline is already compiled).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, PROMPT, MAX_LEN, TOKENS = 768, 12, 8, 2048, 32000, 4, 64, 1024, 16
else:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, PROMPT, MAX_LEN, TOKENS = 64, 4, 2, 128, 256, 2, 8, 128, 4
HEAD_DIM = DIM // HEADS
DTYPE = torch.bfloat16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.o = nn.Linear(DIM, DIM, bias=False)
        self.gate_up = nn.Linear(DIM, 2 * FF, bias=False)
        self.down = nn.Linear(FF, DIM, bias=False)

    def decode(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
               k_cache: torch.Tensor, v_cache: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(self.attn_norm(x)).view(b, 1, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k_cache.index_copy_(2, pos, k)
        v_cache.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, 1, DIM))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        freqs = torch.outer(torch.arange(MAX_LEN, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat([freqs, freqs], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([freqs, freqs], -1).sin(), persistent=False)
        self.register_buffer("positions", torch.arange(MAX_LEN), persistent=False)

    def decode(self, token: torch.Tensor, pos: torch.Tensor, k_caches: list[torch.Tensor],
               v_caches: list[torch.Tensor]) -> torch.Tensor:
        """One token per sequence at position `pos` (a 1-element device tensor): the next tokens (greedy)."""
        x = self.embed(token)[:, None]
        cos, sin = self.cos[pos].to(x.dtype), self.sin[pos].to(x.dtype)
        mask = (self.positions <= pos)[None, None, None, :]
        for layer, kc, vc in zip(self.layers, k_caches, v_caches, strict=True):
            x = layer.decode(x, cos, sin, pos, kc, vc, mask)
        return self.head(self.norm(x[:, 0])).argmax(-1)


def main() -> None:
    args = options(__doc__, ("static_cache",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder()
    for layer in model.layers:
        for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
            nn.init.normal_(lin.weight, std=1.0 / math.sqrt(lin.in_features))
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=gen)
    shape = (BATCH, HEADS, MAX_LEN, HEAD_DIM)
    k_caches = [torch.zeros(shape, device=DEVICE, dtype=DTYPE) for _ in range(LAYERS)]
    v_caches = [torch.zeros(shape, device=DEVICE, dtype=DTYPE) for _ in range(LAYERS)]
    if args.variant == "static_cache":
        for t in (*k_caches, *v_caches):
            torch._dynamo.mark_static_address(t)
    step = torch.compile(model.decode, mode="reduce-overhead")
    assert PROMPT + TOKENS * args.steps <= MAX_LEN, "the static cache holds 1,024 positions"

    with torch.inference_mode():
        pos = torch.zeros(1, dtype=torch.long, device=DEVICE)
        token = torch.empty(BATCH, dtype=torch.long, device=DEVICE)
        for i in range(PROMPT):  # eager prefill, one position at a time, into the same caches
            token.copy_(model.decode(prompt[:, i], pos, k_caches, v_caches))
            pos += 1
        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                token.copy_(step(token, pos, k_caches, v_caches))
                pos += 1
                checksum += token.sum()
            timer.end()
    timer.report(f"ro_decode_cache_args variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
