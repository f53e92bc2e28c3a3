"""A wide MLP trained in fp32 at a large batch: every step is a few large GEMMs, the GPU never waits.

Run: tracekit profile --warmup 1 sample_traces/scripts/train_gpu_bound.py           (fp32 GEMMs)
     tracekit profile --warmup 1 sample_traces/scripts/train_gpu_bound.py --bf16    (autocast to bfloat16)
Steps are marked by tracekit's optimizer.step() hook (step 0: the first, warm-up step).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bf16", action="store_true", help="autocast the forward to bfloat16")
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, dim, layers = (8192, 4096, 4) if cuda else (16, 32, 2)
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(dim, dim), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(dim, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    x = torch.randn(batch, dim, device=device)
    y = torch.arange(batch, device=device) % 10
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.bf16):
            loss = F.cross_entropy(model(x).float(), y)
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
