"""ALiBi attention as a materialised (1, H, L, L) float bias passed to SDPA.

Long-context prefill (inference, bf16 weights) of an MPT/BLOOM-style decoder: 4 pre-norm blocks,
width 1024, 8 heads of 128, GELU MLP 4096, no position embeddings but ALiBi (head h subtracts
2^(-8h/8) * (i - j) from the score of query i on key j), causal, 2 prompts x 8,192 tokens per step,
then the last position's logits over 32,000 tokens. The baseline builds the ALiBi + causal bias once
as a bf16 (1, 8, 8192, 8192) tensor (1.07 GB) and passes it as `attn_mask` to
`F.scaled_dot_product_attention`, which must then use a kernel that reads a bias (no flash, every
key tile scored, the bias re-read per prompt). Variants (the same scores):
  flex         `torch.compile(flex_attention)` with the ALiBi term as a `score_mod` and a causal
               `BlockMask` (key blocks above the diagonal skipped)
  flex_nomask  flex_attention with the causal mask inside the `score_mod` (-inf) and no BlockMask
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("flex", "flex_nomask")


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, attend) -> torch.Tensor:  # type: ignore[no-untyped-def]
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(attend(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, layers, vocab, batch, seq = (1024, 8, 4, 32000, 2, 8192) if CUDA else (64, 4, 2, 500, 2, 256)
    dt = torch.bfloat16 if CUDA else torch.float32
    blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers)).to(DEVICE, dt).eval()
    norm, head = nn.LayerNorm(dim).to(DEVICE, dt), nn.Linear(dim, vocab, bias=False).to(DEVICE, dt)
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, device=DEVICE) / heads)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    prompts = torch.randn(4, batch, seq, dim, device=DEVICE, generator=gen).to(dt)

    if args.variant is None:
        pos = torch.arange(seq, device=DEVICE)
        rel = (pos[:, None] - pos[None, :]).float()
        bias = (-slopes[:, None, None] * rel).masked_fill(rel < 0, float("-inf"))[None].to(dt)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    else:
        flex = torch.compile(flex_attention) if CUDA else flex_attention
        masked = args.variant == "flex_nomask"

        def alibi(score, b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
            s = score - slopes[h] * (q_idx - kv_idx)
            return torch.where(q_idx >= kv_idx, s, float("-inf")) if masked else s

        block_mask = None if masked else create_block_mask(
            lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, seq, seq, device=DEVICE)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return flex(q, k, v, score_mod=alibi, block_mask=block_mask)  # type: ignore[return-value]

    tokens = torch.zeros((), device=DEVICE, dtype=torch.int64)
    check = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            x = prompts[i % 4]
            for blk in blocks:
                x = blk(x, attend)
            last = norm(x[:, -1])
            tokens += head(last).argmax(-1).sum()
            check += last.float().abs().mean()
            timer.end()
    timer.report(f"alibi_attention variant={args.variant or 'baseline'} token checksum {int(tokens.item())} "
                 f"mean |h| {check.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
