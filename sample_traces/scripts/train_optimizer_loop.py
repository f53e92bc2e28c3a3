"""An MLP of 75 small blocks (302 parameter tensors) trained with AdamW(foreach=False): the optimizer
updates one tensor at a time, ~8 small kernels each, more launches than forward and backward together.

Run: tracekit profile --warmup 1 sample_traces/scripts/train_optimizer_loop.py
The "before" of the fused-optimizer rule: train_optimizer_fused.py trains the same model with
AdamW(fused=True), one multi-tensor kernel per group of tensors.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


BLOCKS = 75  # Linear + LayerNorm each: 4 parameter tensors a block, 2 more in the head


def build(device: str, **adamw_options: bool) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """The model, its AdamW (with `adamw_options`, e.g. foreach=False or fused=True) and one batch."""
    batch, width = (64, 256) if device == "cuda" else (4, 16)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(BLOCKS):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    layers.append(nn.Linear(width, 10))
    model = nn.Sequential(*layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **adamw_options)
    x = torch.randn(batch, width, device=device)
    y = torch.arange(batch, device=device) % 10
    return model, optimizer, x, y


def step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One training step: forward, backward, optimizer update."""
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


def main(**adamw_options: bool) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)  # ~2,400 launches a step: 2 keep the trace < 1 MB
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, optimizer, x, y = build(device, **(adamw_options or {"foreach": False}))
    # One warm-up step (cuBLAS heuristics, the optimizer's state): under tracekit its optimizer.step()
    # ends ProfilerStep#0, and the first mark_step() below takes over from that mark (no empty step).
    step(model, optimizer, x, y)
    if device == "cuda":
        torch.cuda.synchronize()
    mark_step()  # record with --warmup 1 to leave the set-up and warm-up step out
    losses = []
    for _ in range(args.steps):
        losses.append(step(model, optimizer, x, y))
        mark_step()
    print(f"loss {float(torch.stack(losses)[-1]):.4f}")


if __name__ == "__main__":
    main()
