"""Batch-1 decoding of a SmolLM-135M-shaped model in eager mode: ~1,300 tiny kernels per token.

A draft / on-device-size Llama-style model written in the Hugging Face layout (30 layers of width
576, 9 query / 3 K/V heads of 64, RMSNorm computed in float32, rotary, SwiGLU 1536, tied
49,152-token embedding), bf16, inference mode, with a static K/V cache of 320 positions (prompt +
max new tokens) in the StaticCache style (`cache_position` tensor, `index_copy_` writes, a boolean
mask over the cache, `repeat_kv`); one 256-token prompt prefilled once, then 3 greedy tokens per
step (the same positions every step), the next token chosen on the GPU (no host read). Each token
is ~1,300 kernel launches of a few microseconds of GPU work each, issued one by one from Python.
Variant `cuda_graph`: one decoding step (forward, argmax, token and position updates) captured
once in a `torch.cuda.CUDAGraph` and replayed per token (the same kernels; on the CPU it runs
eagerly).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("cuda_graph",)).parse_args()
torch.manual_seed(0)
if CUDA:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, VOCAB, PROMPT, NEW, MAX_CACHE = 576, 9, 3, 1536, 30, 49152, 256, 3, 320
    DTYPE = torch.bfloat16
else:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, VOCAB, PROMPT, NEW, MAX_CACHE = 64, 4, 2, 128, 3, 500, 16, 4, 32
    DTYPE = torch.float32
HD = HIDDEN // HEADS
GRAPH = args.variant == "cuda_graph" and CUDA


class LlamaRMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    return torch.cat((-x[..., HD // 2:], x[..., : HD // 2]), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


class LlamaAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HD, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.o_proj = nn.Linear(HEADS * HD, HIDDEN, bias=False)
        self.register_buffer("key_cache", torch.zeros(1, KV_HEADS, MAX_CACHE, HD))
        self.register_buffer("value_cache", torch.zeros(1, KV_HEADS, MAX_CACHE, HD))

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache_position: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = h.shape
        q = self.q_proj(h).view(b, t, HEADS, HD).transpose(1, 2)
        k = self.k_proj(h).view(b, t, KV_HEADS, HD).transpose(1, 2)
        v = self.v_proj(h).view(b, t, KV_HEADS, HD).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        self.key_cache.index_copy_(2, cache_position, k)
        self.value_cache.index_copy_(2, cache_position, v)
        keys = repeat_kv(self.key_cache, HEADS // KV_HEADS)
        values = repeat_kv(self.value_cache, HEADS // KV_HEADS)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, HIDDEN))


class LlamaDecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(HIDDEN), LlamaRMSNorm(HIDDEN)
        self.self_attn = LlamaAttention()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache_position: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache_position, mask)
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SmolLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm(HIDDEN)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        emb = torch.cat([torch.outer(torch.arange(MAX_CACHE, dtype=torch.float32), inv_freq)] * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())
        self.register_buffer("positions", torch.arange(MAX_CACHE))

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        cos = self.cos_cached.index_select(0, cache_position)
        sin = self.sin_cached.index_select(0, cache_position)
        mask = (self.positions[None, :] <= cache_position[:, None])[None, None]  # (1, 1, t, MAX_CACHE)
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, cache_position, mask)
        h = self.norm(h[:, -1:])
        return F.linear(h, self.embed_tokens.weight)[:, -1]  # tied lm_head


with torch.device(DEVICE):
    model = SmolLM()
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
model = model.to(DTYPE).eval()
gen = torch.Generator(device=DEVICE).manual_seed(1)
prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=gen, device=DEVICE)

tokens = torch.zeros(1, NEW, dtype=torch.long, device=DEVICE)
cur_tok = torch.zeros(1, 1, dtype=torch.long, device=DEVICE)
cur_pos = torch.zeros(1, dtype=torch.long, device=DEVICE)


def decode_one() -> None:
    """One token: forward at cur_pos, greedy pick, record it, advance (all on the GPU)."""
    nxt = model(cur_tok, cur_pos).argmax(-1, keepdim=True)
    tokens.index_copy_(1, cur_pos - PROMPT, nxt)
    cur_tok.copy_(nxt)
    cur_pos.add_(1)


with torch.inference_mode():
    first = model(prompt, torch.arange(PROMPT, device=DEVICE)).argmax(-1, keepdim=True)  # prefill once
    if GRAPH:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                cur_tok.copy_(first)
                cur_pos.fill_(PROMPT)
                decode_one()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        cur_tok.copy_(first)
        cur_pos.fill_(PROMPT)
        with torch.cuda.graph(graph):
            decode_one()

    check = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        cur_tok.copy_(first)
        cur_pos.fill_(PROMPT)
        for _ in range(NEW):
            if GRAPH:
                graph.replay()
            else:
                decode_one()
        check += tokens.sum()
        timer.end()
timer.report(f"smol_decode_graph variant={args.variant or 'baseline'} token checksum {check.item()} "
             f"(last tokens {tokens[0].tolist()})")
