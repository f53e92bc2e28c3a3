"""A small MLP trained from a DataLoader whose samples cost Python work: the `tracekit profile --try` sample.

Run: tracekit profile --try tf32,compile,dataloader sample_traces/scripts/train_try.py
Plain PyTorch, no profiler code: `tracekit profile` hooks optimizer.step() to end each ProfilerStep.
Each sample runs a Python loop (`--work` iterations, like per-sample decoding/augmentation; no torch
ops, so the profiler records none per sample) in the DataLoader, which the script creates with its
defaults (num_workers=0, pageable memory), so on a GPU the loader starves the model; the model is
fp32 residual blocks (LayerNorm → Linear → GELU → +) whose GEMMs TF32/bf16 speed up. `--work 0`
skips the per-sample work: the GPU-bound variant (the DataLoader stays, cheap). On the GPU: batch
512, 1024 → 4096 features, 4 blocks, 24 steps; on the CPU a tiny version (batch 8, 32 → 64, 2
blocks, 6 steps) so that it runs anywhere.
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """`n` samples of `features` floats and a class label; each costs `work` Python loop iterations."""

    def __init__(self, n: int, features: int, classes: int, work: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.rows = list(torch.randn(64, features, generator=g).unbind(0))
        self.n, self.classes, self.work = n, classes, work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0.0
        for j in range(self.work):  # per-sample Python work (parsing, augmentation...), no torch ops
            acc += math.sin(i * 0.001 + j)
        return self.rows[i % len(self.rows)], (i + int(acc)) % self.classes


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(blocks))
        self.fcs = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(blocks))
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, fc in zip(self.norms, self.fcs, strict=True):
            h = h + F.gelu(fc(norm(h)))
        return self.out(h)


def main() -> None:
    cuda = torch.cuda.is_available()
    big = cuda
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24 if big else 6)
    p.add_argument("--batch", type=int, default=512 if big else 8)
    p.add_argument("--features", type=int, default=1024 if big else 32)
    p.add_argument("--hidden", type=int, default=4096 if big else 64)
    p.add_argument("--blocks", type=int, default=4 if big else 2)
    p.add_argument("--work", type=int, default=150 if big else 20,
                   help="Python loop iterations per sample (0: no per-sample work)")
    args = p.parse_args()
    device = "cuda" if cuda else "cpu"
    classes = 16
    torch.manual_seed(0)
    data = Samples(args.steps * args.batch, args.features, classes, args.work)
    loader = DataLoader(data, batch_size=args.batch, shuffle=False, drop_last=True)
    model = MLP(args.features, args.hidden, args.blocks, classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"loss: {loss.item():.4f}")


if __name__ == "__main__":
    main()
