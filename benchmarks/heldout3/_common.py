"""Shared pieces of the third held-out set: the second set's device, options and timer, a training loop."""

import runpy
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

_second = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout2" / "_common.py"))
CUDA: bool = _second["CUDA"]
DEVICE: str = _second["DEVICE"]
options = _second["options"]
StepTimer = _second["StepTimer"]


def adamw(params: list[nn.Parameter]) -> torch.optim.AdamW:
    """AdamW at lr 1e-4, fused on CUDA."""
    return torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if CUDA else {}))


def encoder(dim: int, heads: int, layers: int, classes: int) -> tuple[nn.Module, nn.Module, list[nn.Parameter]]:
    """A pre-norm `nn.TransformerEncoder` (MLP 4 x dim, no dropout), a classifier head and their parameters."""
    layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
    body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(DEVICE)
    head = nn.Linear(dim, classes).to(DEVICE)
    return body, head, [*body.parameters(), *head.parameters()]


def train(
    name: str,
    variant: str | None,
    steps: int,
    opt: "torch.optim.Optimizer | object",
    loss_of: Callable[[int], torch.Tensor],
    after: Callable[[torch.Tensor], None] | None = None,
) -> None:
    """Step = loss_of(i), zero_grad, backward, opt.step(), `after(loss)`, tracekit.step(); then the report."""
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(steps):
        timer.tick()
        loss = loss_of(i)
        opt.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        loss.backward()
        opt.step()  # type: ignore[attr-defined]
        total += loss.detach()
        if after is not None:
            after(loss)
        del loss
        timer.end()
    timer.report(f"{name} variant={variant or 'baseline'} mean loss {total.item() / steps:.5f}")
