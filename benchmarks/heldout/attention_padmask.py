"""A self-attention layer of width 1200 with 12 heads (head dim 100) over sequences of 1000 tokens
with a key-padding mask, trained under bf16 autocast: SDPA with a mask and a head dim that is not
a multiple of 8.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/attention_padmask.py
Fixes: --fix pad (q, k, v zero-padded to head dim 104 and the keys to 1008, the pad keys masked out,
the scale kept at 1/sqrt(100), the output sliced back), --fix pad128 (head dim 128, 1024 keys). All
variants compute the same output. On the GPU: batch 16, half the sequences with their last 200
tokens padded, SGD. Steps are marked by tracekit's optimizer.step() hook; at the end it prints the
mean step time measured without the profiler.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, head: int,
              keys: int) -> torch.Tensor:
    """SDPA of (B, H, L, D) inputs with `keep` (B, L) True on real keys, padded to `head`, `keys`."""
    d, length = q.shape[-1], q.shape[-2]
    scale = d ** -0.5
    if head > d or keys > length:
        q = F.pad(q, (0, head - d))
        k = F.pad(k, (0, head - d, 0, keys - length))
        v = F.pad(v, (0, head - d, 0, keys - length))
        keep = F.pad(keep, (0, keys - length), value=False)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], scale=scale)
    return out[..., :d]


def main() -> None:
    args = options(__doc__, ("pad", "pad128")).parse_args()
    batch, length, dim, heads = (16, 1000, 1200, 12) if CUDA else (2, 10, 24, 2)
    d = dim // heads
    head, keys = {"pad": (-(-d // 8) * 8, -(-length // 16) * 16),
                  "pad128": (-(-d // 128) * 128, -(-length // 128) * 128)}.get(args.fix or "", (d, length))
    torch.manual_seed(0)
    qkv, proj = nn.Linear(dim, 3 * dim).to(DEVICE), nn.Linear(dim, dim).to(DEVICE)
    opt = torch.optim.SGD([*qkv.parameters(), *proj.parameters()], lr=1e-3)
    x = torch.randn(batch, length, dim, device=DEVICE)
    keep = torch.ones(batch, length, dtype=torch.bool, device=DEVICE)
    keep[: batch // 2, length - length // 5:] = False
    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, torch.bfloat16):
            q, k, v = qkv(x).view(batch, length, 3, heads, d).permute(2, 0, 3, 1, 4)
            a = attention(q, k, v, keep, head, keys).transpose(1, 2).reshape(batch, length, dim)
            loss = proj(a).float().pow(2).mean()
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"attention_padmask fix={args.fix or 'none'} (head dim {head}, {keys} keys) loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
