"""Multi-head latent attention decoded in DeepSeek's "naive" mode: per-head K/V decompressed into the cache.

Workload: batched greedy decoding with a DeepSeek-V2-Lite-shaped decoder (4 layers of width 2048;
multi-head latent attention with 16 heads, a 512-dim compressed K/V latent, 128 "nope" + 64 rotary
dims per query/key head and 128-dim values; a dense SwiGLU FFN of 10,944 in place of the MoE;
102,400-token head; 744M weights, bf16, inference mode), 32 sequences at a 4,096-token context (the
cache filled at start-up, through each layer's latent projection, from a random context), 4 tokens
per step. Attention follows DeepSeek-V3's reference `MLA.forward` with `attn_impl = "naive"`: the
latent is expanded by `wkv_b` into per-head keys (192) and values (128), which go into a
(B, T, H, D) K cache and V cache (818 + 545 MB per layer), and every token attends with
`einsum("bshd,bthd->bsht", q, k_cache[:, :end])`, a float32 softmax and
`einsum("bsht,bthd->bshd", p, v_cache[:, :end])`; the (B, T, H, D) operands cannot fold into one
batched GEMM, so each einsum also copies its cache slice.

Variant `absorb`: the reference's `attn_impl = "absorb"`: the cache holds the normalised 512-dim
latent and the 64 rotary key dims per position (shared by the heads); `wkv_b`'s key half is folded
into the query (`einsum("bshd,hdc->bshc")`), scores are taken against the latent and the rotary cache,
and the value half is applied after the weighted sum: the same attention by associativity, reading
576 values per position instead of 5,120 (+ the copies).

No extra variant (the step's shapes change with every token, as in the reference).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, KV_RANK, NOPE, ROPE, V_DIM, FF, LAYERS, VOCAB, BATCH, CONTEXT, TOKENS = (
        2048, 16, 512, 128, 64, 128, 10944, 4, 102400, 32, 4096, 4)
else:
    DIM, HEADS, KV_RANK, NOPE, ROPE, V_DIM, FF, LAYERS, VOCAB, BATCH, CONTEXT, TOKENS = (
        64, 4, 16, 8, 8, 8, 128, 2, 256, 2, 32, 4)
QK_DIM = NOPE + ROPE
MAX_LEN = CONTEXT + 16 * TOKENS
DTYPE = torch.bfloat16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding on the last dim; cos / sin broadcast over the heads."""
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


class MLA(nn.Module):
    def __init__(self, absorb: bool) -> None:
        super().__init__()
        self.absorb = absorb
        self.wq = nn.Linear(DIM, HEADS * QK_DIM, bias=False)
        self.wkv_a = nn.Linear(DIM, KV_RANK + ROPE, bias=False)
        self.kv_norm = RMSNorm(KV_RANK)
        self.wkv_b = nn.Linear(KV_RANK, HEADS * (NOPE + V_DIM), bias=False)
        self.wo = nn.Linear(HEADS * V_DIM, DIM, bias=False)
        self.scale = QK_DIM**-0.5

    def latent(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, S, DIM) -> the normalised latent (B, S, KV_RANK) and the rotated shared key (B, S, ROPE)."""
        kv, k_pe = self.wkv_a(x).split([KV_RANK, ROPE], dim=-1)
        return self.kv_norm(kv), rope(k_pe, cos, sin)

    def expand(self, kv: torch.Tensor, k_pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Naive mode's cache entries: per-head keys (B, S, H, QK_DIM) and values (B, S, H, V_DIM)."""
        b, s, _ = kv.shape
        k_nope, v = self.wkv_b(kv).view(b, s, HEADS, NOPE + V_DIM).split([NOPE, V_DIM], dim=-1)
        return torch.cat([k_nope, k_pe[:, :, None].expand(-1, -1, HEADS, -1)], -1), v

    def fill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Write a context's entries at positions 0 .. S - 1 (what a prefill leaves in the cache)."""
        kv, k_pe = self.latent(x, cos, sin)
        if self.absorb:
            cache[0][:, : x.shape[1]] = kv
            cache[1][:, : x.shape[1]] = k_pe
        else:
            k, v = self.expand(kv, k_pe)
            cache[0][:, : x.shape[1]] = k
            cache[1][:, : x.shape[1]] = v

    def decode(self, x: torch.Tensor, pos: int, cos: torch.Tensor, sin: torch.Tensor,
               cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One token per sequence (x (B, 1, DIM)) at position `pos`, as in DeepSeek-V3's `MLA.forward`."""
        b, s, _ = x.shape
        end = pos + s
        q_nope, q_pe = self.wq(x).view(b, s, HEADS, QK_DIM).split([NOPE, ROPE], dim=-1)
        q_pe = rope(q_pe, cos, sin)
        kv, k_pe = self.latent(x, cos[:, :, 0], sin[:, :, 0])  # the shared key: no head dim
        if not self.absorb:
            k, v = self.expand(kv, k_pe)
            k_cache, v_cache = cache
            k_cache[:, pos:end] = k
            v_cache[:, pos:end] = v
            q = torch.cat([q_nope, q_pe], -1)
            scores = torch.einsum("bshd,bthd->bsht", q, k_cache[:, :end]) * self.scale
            p = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
            out = torch.einsum("bsht,bthd->bshd", p, v_cache[:, :end])
        else:
            kv_cache, pe_cache = cache
            kv_cache[:, pos:end] = kv
            pe_cache[:, pos:end] = k_pe
            wkv_b = self.wkv_b.weight.view(HEADS, NOPE + V_DIM, KV_RANK)
            q_lat = torch.einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :NOPE])
            scores = (torch.einsum("bshc,btc->bsht", q_lat, kv_cache[:, :end])
                      + torch.einsum("bshr,btr->bsht", q_pe, pe_cache[:, :end])) * self.scale
            p = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
            out_lat = torch.einsum("bsht,btc->bshc", p, kv_cache[:, :end])
            out = torch.einsum("bshc,hdc->bshd", out_lat, wkv_b[:, NOPE:])
        return self.wo(out.reshape(b, s, HEADS * V_DIM))


class Layer(nn.Module):
    def __init__(self, absorb: bool) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.attn = MLA(absorb)
        self.w1, self.w3 = nn.Linear(DIM, FF, bias=False), nn.Linear(DIM, FF, bias=False)
        self.w2 = nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor, pos: int, cos: torch.Tensor, sin: torch.Tensor,
                cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attn.decode(self.attn_norm(x), pos, cos, sin, cache)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self, absorb: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer(absorb) for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / 10000 ** (torch.arange(0, ROPE, 2, dtype=torch.float32) / ROPE)
        freqs = torch.outer(torch.arange(MAX_LEN, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat([freqs, freqs], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([freqs, freqs], -1).sin(), persistent=False)

    def step(self, token: torch.Tensor, pos: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """token (B,) at position `pos` -> logits (B, VOCAB)."""
        x = self.embed(token)[:, None]
        cos = self.cos[pos:pos + 1].to(x.dtype)[None, :, None]  # (1, 1, 1, ROPE): broadcast over heads
        sin = self.sin[pos:pos + 1].to(x.dtype)[None, :, None]
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, pos, cos, sin, cache)
        return self.head(self.norm(x[:, 0]))


def main() -> None:
    args = options(__doc__, ("absorb",)).parse_args()
    absorb = args.variant == "absorb"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder(absorb)
    for layer in model.layers:
        for lin in (layer.attn.wq, layer.attn.wkv_a, layer.attn.wkv_b, layer.attn.wo, layer.w1, layer.w3, layer.w2):
            nn.init.normal_(lin.weight, std=1.0 / math.sqrt(lin.in_features))
    model = model.to(DTYPE).eval()
    assert CONTEXT + args.steps * TOKENS <= MAX_LEN
    if absorb:
        shapes = ((BATCH, MAX_LEN, KV_RANK), (BATCH, MAX_LEN, ROPE))
    else:
        shapes = ((BATCH, MAX_LEN, HEADS, QK_DIM), (BATCH, MAX_LEN, HEADS, V_DIM))
    caches = [tuple(torch.zeros(s, device=DEVICE, dtype=DTYPE) for s in shapes) for _ in range(LAYERS)]
    gen = torch.Generator(device=DEVICE).manual_seed(0)

    with torch.inference_mode():
        cos, sin = model.cos[:CONTEXT].to(DTYPE)[None], model.sin[:CONTEXT].to(DTYPE)[None]
        for layer, cache in zip(model.layers, caches, strict=True):
            # each layer's input over the context: random hidden states (a prefill's, in distribution)
            h = torch.randn(BATCH, CONTEXT, DIM, device=DEVICE, generator=gen).to(DTYPE)
            layer.attn.fill(layer.attn_norm(h), cos, sin, cache)  # type: ignore[arg-type]
        token = torch.randint(0, VOCAB, (BATCH,), device=DEVICE, generator=gen)
        pos = CONTEXT
        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        logit_sum = torch.zeros((), dtype=torch.float64, device=DEVICE)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                logits = model.step(token, pos, caches)  # type: ignore[arg-type]
                token = logits.argmax(-1)
                pos += 1
                checksum += token.sum()
                logit_sum += logits.float().amax(-1).double().sum()
            timer.end()
    timer.report(f"mla_naive_decode variant={args.variant or 'baseline'} token checksum {checksum.item()} "
                 f"max-logit sum {logit_sum.item():.3f}")


if __name__ == "__main__":
    main()
