"""Decoding with a weight-only int8 LLaMA-style chat model whose linear layers dequantize their whole weight on every call.

Serving a ~3.4 B-parameter LLaMA-style model (width 4,096, 16 layers, SwiGLU MLP 11,008, RMSNorm,
rotary embeddings, 32 heads) quantized to int8 weights with one bf16 scale per output channel, to
halve its memory. 8 chat sessions decode 6 tokens per step (greedy) against a static KV cache that
already holds a 256-token prompt. The quantized linear layer is the one found in countless
repositories' `QuantLinear`: `F.linear(x, self.weight.to(x.dtype) * self.scale[:, None])`, which at
decode time (8 rows of activations) writes a full bf16 copy of every weight matrix and reads it back,
so each token moves several times more bytes than the bf16 model would, and the "compressed" model
is slower than the uncompressed one.

Variants:
- baseline: dequantize-then-matmul in eager PyTorch (two elementwise kernels and a bf16 GEMM per layer).
- int8_mm: the same int8 weights and scales through `torch._weight_int8pack_mm(x, w_int8, scale)`,
  the fused weight-only int8 matmul kernel (the one torchao's int8 weight-only path and
  Inductor's quantized lowering call), which reads the int8 weight once and applies the scales to
  the output.

Sources: the meta registration of `aten._weight_int8pack_mm` (`torch/_meta_registrations.py`) and
`torch/_inductor/quantized_lowerings.py` in the installed torch 2.13 (shapes: x (M, K), w (N, K) int8,
scales (N,)); gpt-fast's and torchao's int8 weight-only quantization (cited from memory).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Int8Linear(nn.Module):
    """Weight-only int8 linear layer, symmetric per-output-channel scales."""

    def __init__(self, w: torch.Tensor, fused: bool) -> None:
        super().__init__()
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.register_buffer("weight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(w.dtype))
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return torch._weight_int8pack_mm(x.reshape(-1, x.size(-1)), self.weight, self.scale).view(*x.shape[:-1], -1)
        return F.linear(x, self.weight.to(x.dtype) * self.scale[:, None])


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Layer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, fused: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.heads = heads

        def q(i: int, o: int) -> Int8Linear:
            return Int8Linear(torch.randn(o, i, dtype=dtype) / i**0.5, fused)

        self.n1, self.n2 = RMSNorm(d).to(dtype), RMSNorm(d).to(dtype)  # bf16 like the rest (fixed after the first run)
        self.wq, self.wk, self.wv, self.wo = q(d, d), q(d, d), q(d, d), q(d, d)
        self.gate, self.up, self.down = q(d, ff), q(d, ff), q(ff, d)

    def forward(self, x: torch.Tensor, pos: int, cos: torch.Tensor, sin: torch.Tensor,
                kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n1(x)
        q, k, v = (m(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for m in (self.wq, self.wk, self.wv))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kc[:, :, pos : pos + t] = k
        vc[:, :, pos : pos + t] = v
        a = F.scaled_dot_product_attention(q, kc[:, :, : pos + t], vc[:, :, : pos + t])
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ChatLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, ff: int, layers: int, fused: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d).to(dtype)
        self.layers = nn.ModuleList(Layer(d, heads, ff, fused, dtype) for _ in range(layers))
        self.norm = RMSNorm(d).to(dtype)
        self.head = nn.Linear(d, vocab, bias=False).to(dtype)  # the LM head is usually kept in bf16

    def forward(self, tok: torch.Tensor, pos: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        hd = self.embed.embedding_dim // self.heads
        inv = 1.0 / (10000 ** (torch.arange(hd // 2, device=tok.device, dtype=torch.float32) / (hd // 2)))
        ang = (pos + torch.arange(tok.size(1), device=tok.device, dtype=torch.float32))[:, None] * inv[None]
        x = self.embed(tok)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer(x, pos, cos, sin, kc, vc)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, ("int8_mm",)).parse_args()
    torch.manual_seed(0)
    sessions, prompt, new, d, heads, ff, layers, vocab = (
        (8, 256, 6, 4096, 32, 11008, 16, 32000) if CUDA else (2, 8, 4, 64, 4, 128, 2, 500))
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = ChatLM(vocab, d, heads, ff, layers, args.variant == "int8_mm", dtype).eval()
    max_len = prompt + new * args.steps
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    caches = [(torch.zeros(sessions, heads, max_len, d // heads, device=DEVICE, dtype=dtype),
               torch.zeros(sessions, heads, max_len, d // heads, device=DEVICE, dtype=dtype)) for _ in range(layers)]
    for kc, vc in caches:  # the prompt's keys and values, as if prefilled
        kc[:, :, :prompt].normal_(generator=gen)
        vc[:, :, :prompt].normal_(generator=gen)
    tok = torch.randint(0, vocab, (sessions, 1), device=DEVICE, generator=gen)
    pos = prompt
    timer = StepTimer()
    checksum = torch.zeros((), device=DEVICE, dtype=torch.int64)
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            for _ in range(new):
                logits = model(tok, pos, caches)
                tok = logits[:, -1:].argmax(dim=-1)
                checksum += tok.sum()
                pos += 1
            timer.end()
    timer.report(f"int8_chat_decode_dequant variant={args.variant or 'baseline'} token checksum {int(checksum)}")


if __name__ == "__main__":
    main()
