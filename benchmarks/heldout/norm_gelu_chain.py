"""Transformer MLP blocks written out by hand, the way research code often has them: a LayerNorm
from mean/var ops, the tanh GELU formula, dropout and the residual, trained under bf16 autocast.

Run: tracekit profile --warmup 3 --active 4 benchmarks/heldout/norm_gelu_chain.py
Fixes: --fix native (F.layer_norm, F.gelu(approximate="tanh"), F.dropout: one kernel each),
--fix compile (torch.compile of the hand-written model: Inductor fuses the chains). On the GPU: 4
blocks of width 1024 (MLP 4096), 8 x 1024 tokens, AdamW. Steps are marked by tracekit's
optimizer.step() hook; at the end it prints the mean step time measured without the profiler.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn

P_DROP, EPS = 0.1, 1e-5


class Block(nn.Module):
    def __init__(self, dim: int, native: bool) -> None:
        super().__init__()
        self.native = native
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native:
            h = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, EPS)
            h = F.gelu(self.fc1(h), approximate="tanh")
            return x + F.dropout(self.fc2(h), P_DROP, self.training)
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        h = (x - mean) / torch.sqrt(var + EPS) * self.weight + self.bias
        h = self.fc1(h)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))
        h = self.fc2(h)
        keep = (torch.rand_like(h) > P_DROP).to(h.dtype)
        return x + h * keep / (1.0 - P_DROP)


def main() -> None:
    args = options(__doc__, ("native", "compile")).parse_args()
    dim, blocks, batch, seq = (1024, 4, 8, 1024) if CUDA else (32, 2, 2, 8)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim, args.fix == "native") for _ in range(blocks)]).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model) if args.fix == "compile" else model
    x = torch.randn(batch, seq, dim, device=DEVICE)
    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, torch.bfloat16):
            loss = run(x).float().pow(2).mean()
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"norm_gelu_chain fix={args.fix or 'none'} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
