"""Batched greedy decode with grouped-query attention whose K/V cache is expanded to every query head by `repeat_interleave` per token and layer.

Llama-style decoder (8 layers, width 4096, 32 query heads and 8 K/V heads of 128, SwiGLU 14336,
vocab 32k, bf16, no rotary embedding), batch 16, a 4,096-position cache per layer filled with
fixed random K/V (standing in for the prompt's prefill), 8 new tokens per step (each step starts
again at position 4,096, so every step does the same work). Baseline: `k.repeat_interleave(4, 1)`
and the same for v over the filled cache, then SDPA with 32 heads. Variants: `enable_gqa`
(SDPA on the 8-head cache with `enable_gqa=True`), `fold_groups` (the 4 query heads of each
K/V head folded into the query-length axis: SDPA on (B, 8, 4, 128) queries against the 8-head
cache, no mask: the single new position sees the whole cache). The same tokens up to rounding.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("enable_gqa", "fold_groups")


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, heads, kv_heads, ffn, layers, vocab = (4096, 32, 8, 14336, 8, 32000) if cuda else (64, 8, 2, 128, 2, 100)
    batch, prompt, new = (16, 4096, 8) if cuda else (2, 24, 4)
    hd, group, dt = dim // heads, heads // kv_heads, (torch.bfloat16 if cuda else torch.float32)
    torch.manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, device=dev) / shape[-1] ** 0.5).to(dt)

    emb, lm_head = w(vocab, dim) * dim ** 0.5, w(vocab, dim)
    blocks = [(w(dim + 2 * kv_heads * hd, dim), w(dim, dim), w(2 * ffn, dim), w(dim, ffn)) for _ in range(layers)]
    kc = [torch.randn(batch, kv_heads, prompt + new, hd, device=dev).to(dt) for _ in range(layers)]
    vc = [torch.randn(batch, kv_heads, prompt + new, hd, device=dev).to(dt) for _ in range(layers)]
    start = torch.randint(0, vocab, (batch,), device=dev)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, H, 1, D) against the filled cache k, v (B, Hkv, n, D) -> (B, H, 1, D)."""
        if args.variant == "enable_gqa":
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        if args.variant == "fold_groups":
            o = F.scaled_dot_product_attention(q.reshape(batch, kv_heads, group, hd), k, v)
            return o.reshape(batch, heads, 1, hd)
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))

    def token(tok: torch.Tensor, pos: int) -> torch.Tensor:
        x = emb[tok]
        for (wqkv, wo, wgu, wd), k_cache, v_cache in zip(blocks, kc, vc, strict=True):
            qkv = F.linear(F.rms_norm(x, (dim,)), wqkv)
            q = qkv[:, :dim].view(batch, heads, 1, hd)
            k_cache[:, :, pos].copy_(qkv[:, dim:dim + kv_heads * hd].view(batch, kv_heads, hd))
            v_cache[:, :, pos].copy_(qkv[:, dim + kv_heads * hd:].view(batch, kv_heads, hd))
            o = attend(q, k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1])
            x = x + F.linear(o.reshape(batch, dim), wo)
            gate, up = F.linear(F.rms_norm(x, (dim,)), wgu).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, wd)
        return F.linear(F.rms_norm(x, (dim,)), lm_head).argmax(-1)

    timer, total = C["StepTimer"](), torch.zeros((), dtype=torch.int64, device=dev)
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            tok = start
            for t in range(new):
                tok = token(tok, prompt + t)
                total += tok.sum()
            timer.end()
        timer.report(f"gqa_repeat variant={args.variant or 'baseline'} token checksum {int(total.item())}")


if __name__ == "__main__":
    main()
