"""A residual MLP (LayerNorm, GELU) trained at a moderate batch: the CPU's launches and the GPU's
kernels take about as long; the fix captures forward and backward in CUDA graphs.

Run: tracekit profile --warmup 1 sample_traces/scripts/train_balanced.py            (eager)
     tracekit profile --warmup 1 sample_traces/scripts/train_balanced.py --graphed   (torch.cuda.make_graphed_callables)
Steps are marked by tracekit's optimizer.step() hook. The optimizer is the fused AdamW in both.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class Residual(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--graphed", action="store_true", help="forward + backward replayed from CUDA graphs")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--batch", type=int, default=None)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, dim, layers = (384, 1536, 12) if cuda else (8, 32, 2)
    batch = args.batch or batch
    torch.manual_seed(0)
    model = nn.Sequential(*[Residual(dim) for _ in range(layers)], nn.Linear(dim, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    x = torch.randn(batch, dim, device=device)
    y = torch.arange(batch, device=device) % 10
    step_model: nn.Module = model
    if args.graphed and cuda:
        step_model = torch.cuda.make_graphed_callables(model, (x,))
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(step_model(x), y)
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
