"""An evaluation loop that forgot `torch.no_grad()`: every forward records an autograd graph nobody uses.

Run: tracekit profile --warmup 1 --active 6 sample_traces/scripts/eval_grad_mode.py [--fixed]
A residual MLP scorer (8 pre-norm blocks: LayerNorm, Linear 512 -> 1024, GELU, Linear 1024 -> 512,
add; fp32, random weights that require grad, as a model loaded for training has them, `eval()`), 16
batches of 32 rows per step, each scored and summed into a running total on the GPU. Without a
grad-disabling context each op on a weight that requires grad creates an autograd node and saves its
inputs: host work the GPU waits for in this launch-bound loop. `--fixed` runs the loop under
`torch.inference_mode()`: the same kernels, no graph. Without CUDA it runs tiny sizes on the CPU.
"""

import argparse
import contextlib
import time

import torch
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
BLOCKS, WIDTH, BATCHES, ROWS = (8, 512, 16, 32) if CUDA else (2, 32, 2, 4)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="steps after the warm-up one (default 10)")
    p.add_argument("--fixed", action="store_true", help="score under torch.inference_mode()")
    args = p.parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = nn.Sequential(*(Block() for _ in range(BLOCKS)), nn.Linear(WIDTH, 1)).eval()
        data = torch.randn(BATCHES, ROWS, WIDTH)
        total = torch.zeros(())
    times = []
    with torch.inference_mode() if args.fixed else contextlib.nullcontext():
        for _ in range(args.steps + 1):
            if CUDA:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(BATCHES):
                total = total + model(data[i]).sum().detach()
            if CUDA:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            mark_step()  # step 0, with the kernels' first-call set-up, is the warm-up
    steady = times[1:]
    print(f"eval_grad_mode fixed={args.fixed} total {float(total.item()):.4f}: mean step time over steps "
          f"1..{args.steps}: {1e3 * sum(steady) / len(steady):.3f} ms")


if __name__ == "__main__":
    main()
