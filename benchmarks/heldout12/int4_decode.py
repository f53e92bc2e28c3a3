"""Batch-1 greedy decoding of Qwen2.5-72B-shaped layers with bf16 weights that sit on a 4-bit grid.

A Qwen2-style decoder (2 layers of width 8192, 64 query / 8 K/V heads of 128, q/k/v biases,
rotary theta 1e6, RMSNorm, SwiGLU 29,568; untied 152,064-token embedding and head; 3.0B weights in
the projections and the head), inference mode, one 512-token prompt prefilled into a static K/V
cache, then 16 greedy tokens per step (the same 16 positions every step). Every projection weight
(and the head) comes from a 4-bit checkpoint: values (q - 8) * s with q in 0..15 and one
power-of-two scale per group of 128 inputs, dequantised once at load and served as bf16
`nn.Linear` weights, so each token streams 6 GB of bf16 weights. Variant `int4_weight_only`: the
same int4 values and scales kept packed (torchao int4 weight-only, group 128, tinygemm layout:
`torch.ops.aten._convert_weight_to_int4pack`) and every projection computed by
`torch.ops.aten._weight_int4pack_mm` (1.5 GB per token); biases, norms, attention unchanged.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("int4_weight_only",)).parse_args()
torch.manual_seed(0)
if CUDA:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, VOCAB, PROMPT, NEW = 8192, 64, 8, 29568, 2, 152064, 512, 16
else:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, VOCAB, PROMPT, NEW = 256, 4, 2, 384, 2, 1024, 24, 6
HD = HIDDEN // HEADS
GROUP = 128
INT4 = args.variant == "int4_weight_only"
MAX_POS = PROMPT + NEW
gen = torch.Generator(device=DEVICE).manual_seed(1)


class Int4Linear(nn.Module):
    """Weight-only int4 (group 128, zero point 0 in the bf16 domain): y = x @ ((q - 8) * s)^T + b."""

    def __init__(self, q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features = q.shape[0]
        if CUDA:  # tinygemm wants (N, K / 2) uint8 with the even column in the high nibble
            packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            self.register_buffer("weight", torch.ops.aten._convert_weight_to_int4pack(packed.contiguous(), 8))
        else:
            self.register_buffer("weight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 8))
        self.register_buffer("scales_and_zeros", torch.stack([scales, torch.zeros_like(scales)], -1).transpose(0, 1).contiguous())
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        if CUDA:
            y = torch.ops.aten._weight_int4pack_mm(x2, self.weight, GROUP, self.scales_and_zeros)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.weight, GROUP, self.scales_and_zeros)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def checkpoint_linear(n_in: int, n_out: int, bias: bool) -> nn.Module:
    """A projection from the 4-bit checkpoint: bf16 dequantised (baseline) or kept packed (variant)."""
    q = torch.randint(0, 16, (n_out, n_in), generator=gen, device=DEVICE, dtype=torch.uint8)
    base = -round(torch.log2(torch.tensor(4.6 * n_in ** 0.5)).item())
    scales = torch.exp2(base - torch.randint(0, 2, (n_out, n_in // GROUP), generator=gen, device=DEVICE)).to(torch.bfloat16)
    b = (torch.randn(n_out, generator=gen, device=DEVICE) * 0.02).to(torch.bfloat16) if bias else None
    if INT4:
        return Int4Linear(q, scales, b)
    lin = nn.Linear(n_in, n_out, bias=bias, device=DEVICE, dtype=torch.bfloat16)
    w = (q.view(n_out, n_in // GROUP, GROUP).to(torch.bfloat16) - 8) * scales[:, :, None]
    lin.weight.data = w.view(n_out, n_in)
    if b is not None:
        lin.bias.data = b
    return lin


class Qwen2RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=DEVICE, dtype=torch.bfloat16))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    return torch.cat((-x[..., HD // 2:], x[..., : HD // 2]), dim=-1)


class Qwen2DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Qwen2RMSNorm(HIDDEN), Qwen2RMSNorm(HIDDEN)
        self.q_proj = checkpoint_linear(HIDDEN, HEADS * HD, True)
        self.k_proj = checkpoint_linear(HIDDEN, KV_HEADS * HD, True)
        self.v_proj = checkpoint_linear(HIDDEN, KV_HEADS * HD, True)
        self.o_proj = checkpoint_linear(HEADS * HD, HIDDEN, False)
        self.gate_proj = checkpoint_linear(HIDDEN, INTER, False)
        self.up_proj = checkpoint_linear(HIDDEN, INTER, False)
        self.down_proj = checkpoint_linear(INTER, HIDDEN, False)
        self.register_buffer("k_cache", torch.zeros(1, KV_HEADS, MAX_POS, HD, device=DEVICE, dtype=torch.bfloat16))
        self.register_buffer("v_cache", torch.zeros(1, KV_HEADS, MAX_POS, HD, device=DEVICE, dtype=torch.bfloat16))

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int) -> torch.Tensor:
        b, t, _ = h.shape
        x = self.input_layernorm(h)
        q = self.q_proj(x).view(b, t, HEADS, HD).transpose(1, 2)
        k = self.k_proj(x).view(b, t, KV_HEADS, HD).transpose(1, 2)
        v = self.v_proj(x).view(b, t, KV_HEADS, HD).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        self.k_cache[:, :, start:start + t] = k
        self.v_cache[:, :, start:start + t] = v
        keys, values = self.k_cache[:, :, : start + t], self.v_cache[:, :, : start + t]
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1, enable_gqa=True)
        h = h + self.o_proj(out.transpose(1, 2).reshape(b, t, HIDDEN))
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2ForCausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN, device=DEVICE, dtype=torch.bfloat16)
        nn.init.normal_(self.embed_tokens.weight, std=0.02, generator=gen)
        self.layers = nn.ModuleList([Qwen2DecoderLayer() for _ in range(LAYERS)])
        self.norm = Qwen2RMSNorm(HIDDEN)
        self.lm_head = checkpoint_linear(HIDDEN, VOCAB, False)
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, HD, 2, dtype=torch.float32, device=DEVICE) / HD))
        emb = torch.cat([torch.outer(torch.arange(MAX_POS, dtype=torch.float32, device=DEVICE), inv_freq)] * 2, -1)
        self.register_buffer("cos", emb.cos().to(torch.bfloat16))
        self.register_buffer("sin", emb.sin().to(torch.bfloat16))

    def forward(self, input_ids: torch.Tensor, start: int) -> torch.Tensor:
        t = input_ids.shape[1]
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, start)
        return self.lm_head(self.norm(h[:, -1:]))[:, -1]


model = Qwen2ForCausalLM().eval()
prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=gen, device=DEVICE)

tokens = torch.zeros(1, NEW, dtype=torch.long, device=DEVICE)
check = torch.zeros((), device=DEVICE, dtype=torch.long)
timer = StepTimer()
with torch.inference_mode():
    first = model(prompt, 0).argmax(-1, keepdim=True)  # prefill once
    for _ in range(args.steps):
        timer.tick()
        nxt = first
        for j in range(NEW):
            tokens[:, j:j + 1] = nxt
            nxt = model(nxt, PROMPT + j).argmax(-1, keepdim=True)
        check += tokens.sum()
        timer.end()
timer.report(f"int4_decode variant={args.variant or 'baseline'} token checksum {check.item()} "
             f"(last tokens {tokens[0, -4:].tolist()})")
