"""A small decoder-only transformer trained with an additive float causal mask that is built on the
host every step (`torch.full(-inf).triu(1)` on the CPU, copied to the GPU) and passed to
scaled_dot_product_attention as `attn_mask`, broadcast over batch and heads.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/causal_mask.py
Variants: --variant cached_mask (the same mask built once on the GPU and reused), --variant is_causal
(no mask: `is_causal=True`). On the GPU: 4 layers, width 1024, 16 heads (head dim 64), sequence 2048,
batch 4, bf16 autocast, AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


def host_mask(t: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive causal mask as often written: built on the CPU, then moved to the device."""
    return torch.full((t, t), float("-inf")).triu(1).to(DEVICE, dtype)


def main() -> None:
    args = options(__doc__, ("cached_mask", "is_causal")).parse_args()
    dim, heads, layers, seq, batch, vocab = (1024, 16, 4, 2048, 4, 8192) if CUDA else (32, 4, 2, 16, 2, 64)
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, dim).to(DEVICE)
    net = nn.ModuleList([Layer(dim, heads) for _ in range(layers)]).to(DEVICE)
    head = nn.Linear(dim, vocab).to(DEVICE)
    params = [*emb.parameters(), *net.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if CUDA else {}))
    ids = torch.randint(0, vocab, (batch, seq + 1), device=DEVICE)
    cached = host_mask(seq, dtype).to(DEVICE) if args.variant == "cached_mask" else None
    timer = StepTimer()
    loss = torch.zeros(())
    for _ in range(args.steps):
        timer.tick()
        mask = host_mask(seq, dtype) if args.variant is None else cached
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            h = emb(ids[:, :-1])
            for layer in net:
                h = layer(h, mask)
            loss = F.cross_entropy(head(h).float().view(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"causal_mask variant={args.variant or 'baseline'} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
