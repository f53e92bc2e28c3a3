"""A training loop that copies each batch from pageable host memory: the copy blocks the CPU, so
the GPU waits for the launches that follow it.

Run: tracekit profile sample_traces/scripts/train_copies.py            (pageable tensors, blocking copy)
     tracekit profile sample_traces/scripts/train_copies.py --fixed    (pinned tensors, non_blocking)
Steps are marked by tracekit's optimizer.step() hook. The batches are made up front, so both
versions do the same CPU work per step.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="pinned host memory and non_blocking copies")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, dim, hidden, depth = (4096, 4096, 1024, 6) if cuda else (16, 32, 32, 2)
    torch.manual_seed(0)
    pool = [torch.randn(batch, dim) for _ in range(4)]  # 64 MiB each on the GPU machine
    if args.fixed and cuda:
        pool = [t.pin_memory() for t in pool]
    layers: list[nn.Module] = [nn.Linear(dim, hidden), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU()]
    layers.append(nn.Linear(hidden, 10))
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        x = pool[i % len(pool)].to(device, non_blocking=args.fixed)
        y = torch.arange(batch, device=device) % 10
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = times[4:] + [end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"loss {loss.item():.4f}; mean step time over steps 4..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
