"""Whisper-style greedy decoding whose cross-attention recomputes the encoder's keys and values at every token.

Baseline: the decoder of a Whisper-style speech recogniser (6 pre-norm layers of width 1024, 16 heads
of 64, self-attention over a preallocated K/V cache, cross-attention over the encoder's 1,500 audio
frames, GELU MLP 4096, tied 51,865-token head), bf16, inference mode; 32 utterances decoded together,
a 4-token start-of-transcript prompt then 16 greedy tokens per step (the prompt's pass and 15 one-token
passes; the encoder output is given).
Each layer's cross-attention projects `k_proj(audio)` and `v_proj(audio)` again for every token, as in
a decoder written without a cross-attention cache. Variant `cache_cross_kv`: the cross-attention
keys and values of every layer projected once per batch of utterances (at the start of the step) and
reused by every token.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer"))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=b) for b in (True, False, True, True))
        self.cq, self.ck, self.cv, self.co = (nn.Linear(dim, dim, bias=b) for b in (True, False, True, True))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def cross_kv(self, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.ck(audio)), self.split(self.cv(audio))

    def forward(self, x: torch.Tensor, pos: int, cache: tuple[torch.Tensor, torch.Tensor],
                audio: torch.Tensor, cross: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        kc, vc = cache
        kc[:, :, pos:pos + t] = self.split(self.k(h))
        vc[:, :, pos:pos + t] = self.split(self.v(h))
        a = F.scaled_dot_product_attention(self.split(self.q(h)), kc[:, :, :pos + t], vc[:, :, :pos + t], is_causal=t > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        ck, cv = cross if cross is not None else self.cross_kv(audio)  # baseline: projected again for every token
        a = F.scaled_dot_product_attention(self.split(self.cq(self.ln2(x))), ck, cv)
        x = x + self.co(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln3(x))))


class Decoder(nn.Module):
    def __init__(self, vocab: int, ctx: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(ctx, dim) * 0.01)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, tok: torch.Tensor, pos: int, caches: list[tuple[torch.Tensor, torch.Tensor]],
                audio: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]] | None) -> torch.Tensor:
        x = self.embed(tok) + self.pos[pos:pos + tok.shape[1]]
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, caches[i], audio, cross[i] if cross is not None else None)
        return self.ln(x[:, -1]) @ self.embed.weight.t()  # tied head, last position


def main() -> None:
    args = options(__doc__, ("cache_cross_kv",)).parse_args()
    torch.manual_seed(0)
    # GPU: 32 utterances x 1,500 frames, width 1024, 6 layers; CPU check: 2 x 30 frames, width 64, 2 layers
    batch, frames, dim, heads, layers, vocab = (32, 1500, 1024, 16, 6, 51865) if CUDA else (2, 30, 64, 4, 2, 500)
    prompt, new = 4, 15
    dtype = torch.bfloat16 if CUDA else torch.float32
    dec = Decoder(vocab, 448, dim, heads, layers).to(DEVICE, dtype).eval()
    g = torch.Generator(device=DEVICE).manual_seed(1)
    audio = torch.randn(batch, frames, dim, device=DEVICE, generator=g).to(dtype)
    start = torch.tensor([50258, 50259, 50359, 50363] if CUDA else [496, 497, 498, 499], device=DEVICE).expand(batch, prompt)
    caches = [(torch.zeros(batch, heads, prompt + new, dim // heads, device=DEVICE, dtype=dtype),
               torch.zeros(batch, heads, prompt + new, dim // heads, device=DEVICE, dtype=dtype)) for _ in range(layers)]
    out = torch.empty(batch, new + 1, dtype=torch.long, device=DEVICE)

    total = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            cross = [layer.cross_kv(audio) for layer in dec.layers] if args.variant == "cache_cross_kv" else None
            logits = dec(start, 0, caches, audio, cross)
            out[:, 0] = logits.argmax(-1)
            for j in range(new):
                logits = dec(out[:, j:j + 1], prompt + j, caches, audio, cross)
                out[:, j + 1] = logits.argmax(-1)
            total += out.sum()
            timer.end()
    timer.report(f"cross_kv_recompute variant={args.variant or 'baseline'} token checksum {total.item()}")


if __name__ == "__main__":
    main()
