"""A transformer block trained under torch.compile: the first step compiles (Dynamo, Inductor,
Triton autotuning), the following ones run the compiled kernels.

Run: tracekit profile sample_traces/scripts/train_compile.py
     tracekit profile sample_traces/scripts/train_compile.py --eager   (the same model, not compiled)
Steps are marked by tracekit's optimizer.step() hook; nothing is warmed up before recording, as in
a user's first profile of a compiled model.
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
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--eager", action="store_true", help="run the model eagerly (no torch.compile)")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, seq, d, heads, layers = (16, 512, 1024, 16, 4) if cuda else (2, 16, 32, 4, 1)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(d, heads) for _ in range(layers)]).to(device)
    compiled = model if args.eager else torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d, device=device)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = compiled(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = times[3:] + [end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"loss {loss.item():.4f}; mean step time over steps 3..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
