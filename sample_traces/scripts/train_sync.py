"""An MLP training loop that reads the loss with .item() every step, then prepares the next batch
on the CPU: the sync drains the GPU queue, so the CPU work no longer overlaps GPU work.

Run: tracekit profile sample_traces/scripts/train_sync.py            (loss.item() every step)
     tracekit profile sample_traces/scripts/train_sync.py --fixed    (loss summed on the GPU, read once)
Steps are marked by tracekit's optimizer.step() hook.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


def host_batch_prep(batch: int, dim: int, seed: int, work: int) -> torch.Tensor:
    """CPU-side work per step (tokenising, parsing, augmenting...): a few ms of Python."""
    scale = sum(math.sin(seed * k) for k in range(work)) / max(work, 1)
    return torch.full((batch, dim), 1.0 + 0.01 * scale)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="no per-step .item()")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, dim, hidden, layers, work = (512, 512, 4096, 8, 20_000) if cuda else (8, 32, 64, 2, 1000)
    torch.manual_seed(0)
    blocks = [nn.Linear(dim, hidden), nn.GELU()]
    for _ in range(layers - 2):
        blocks += [nn.Linear(hidden, hidden), nn.GELU()]
    blocks += [nn.Linear(hidden, 10)]
    model = nn.Sequential(*blocks).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    running = torch.zeros((), device=device)
    host = host_batch_prep(batch, dim, 0, work)
    times, losses = [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        x = host.to(device, non_blocking=True)
        y = torch.arange(batch, device=device) % 10
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fixed:
            running += loss.detach()
        else:
            losses.append(loss.item())  # logging: blocks until the step's kernels finish
        host = host_batch_prep(batch, dim, i + 1, work)  # the next batch, on the CPU
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = times[4:] + [end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    mean = running.item() / args.steps if args.fixed else sum(losses) / len(losses)
    print(f"mean loss {mean:.4f}; mean step time over steps 4..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
