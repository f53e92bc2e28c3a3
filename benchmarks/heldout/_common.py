"""Shared pieces of the held-out workloads: the device, step marks, options and the printed step time."""

import argparse
import time
from collections.abc import Callable

import torch

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def options(doc: str, fixes: tuple[str, ...], steps: int = 12) -> argparse.ArgumentParser:
    """The common command line: `--fix NAME` (none: the baseline) and `--steps N`."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--fix", choices=fixes, default=None, help="the candidate fix (default: the baseline)")
    p.add_argument("--steps", type=int, default=steps)
    return p


class StepTimer:
    """Host wall-clock at each step start; the mean over the steps after the warm-up ones."""

    def __init__(self, warmup: int = 4) -> None:
        self.warmup = warmup
        self.starts: list[float] = []

    def tick(self) -> None:
        self.starts.append(time.perf_counter())

    def report(self, label: str) -> float:
        """Synchronise, then print `LABEL: mean step time over steps A..B: X ms` and return X."""
        if CUDA:
            torch.cuda.synchronize()
        end = time.perf_counter()
        first = min(self.warmup, max(len(self.starts) - 1, 0))
        steady = [*self.starts[first:], end]
        per = (steady[-1] - steady[0]) / max(len(steady) - 1, 1)
        print(f"{label}: mean step time over steps {first}..{len(self.starts) - 1}: {per * 1e3:.3f} ms")
        return per * 1e3


def train(opt: torch.optim.Optimizer, steps: int, loss_of: Callable[[int], torch.Tensor]) -> tuple[StepTimer, torch.Tensor]:
    """The plain training loop: loss of step i, zero_grad, backward, optimizer.step (tracekit's step mark)."""
    timer = StepTimer()
    loss = torch.zeros(())
    for i in range(steps):
        timer.tick()
        loss = loss_of(i)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return timer, loss
