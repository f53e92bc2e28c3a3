"""A small GPT-style decoder trained in fp32, and the same under bf16 autocast: the fp32 step is GPU-bound, the bf16 one is set by the host (the casts autocast adds included).

Run: tracekit profile --warmup 2 --active 4 sample_traces/scripts/train_autocast.py --steps 8          (fp32)
     tracekit profile --warmup 2 --active 4 sample_traces/scripts/train_autocast.py --steps 8 --bf16   (autocast)
8 pre-norm blocks of width 1024 (16 heads, causal SDPA, GELU MLP 4x), batch 8 × 256 tokens, vocab
8192, AdamW (fused). Steps are marked by tracekit's optimizer.step() hook.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bf16", action="store_true", help="autocast the forward and the loss to bfloat16")
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    vocab, d, heads, layers, batch, seq = (8192, 1024, 16, 8, 8, 256) if cuda else (64, 32, 4, 2, 2, 16)
    torch.manual_seed(0)
    model = Decoder(vocab, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inp, target = tokens[:, :-1], tokens[:, 1:]
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(inp)
            loss = F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = times[2:] + [end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"loss {loss.item():.4f}; mean step time over steps 2..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
