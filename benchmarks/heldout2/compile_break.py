"""A torch.compile'd MLP stack whose blocks each call a `@torch._dynamo.disable` activation-statistics
hook (a common debugging/monitoring helper): every block is a graph break, so each step runs 2 x
blocks compiled regions with eager code between them. Inference (no_grad).

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/compile_break.py
Variants: --variant fullgraph (the statistics computed inside the graph and returned as tensors,
compiled with fullgraph=True), --variant eager (no torch.compile). On the GPU: 8 blocks of width 2048
(LayerNorm, Linear 2048->4096, GELU, Linear 4096->2048), 256 tokens, bf16, 16 forward calls per step.
Each step ends with tracekit.step().
"""

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

STATS: list[torch.Tensor] = []


@torch._dynamo.disable
def record_stats(x: torch.Tensor) -> None:
    """The monitoring hook: the RMS of the activations, kept as a tensor (no host sync)."""
    STATS.append(x.float().pow(2).mean().sqrt())


class Block(nn.Module):
    def __init__(self, dim: int, hook: bool) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.hook = hook

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = nn.functional.gelu(self.fc1(self.norm(x)))
        if self.hook:
            record_stats(h)
            return x + self.fc2(h), None
        return x + self.fc2(h), h.float().pow(2).mean().sqrt()


class Net(nn.Module):
    def __init__(self, dim: int, blocks: int, hook: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, hook) for _ in range(blocks)])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        stats = []
        for b in self.blocks:
            x, s = b(x)
            if s is not None:
                stats.append(s)
        return x, stats


def main() -> None:
    args = options(__doc__, ("fullgraph", "eager")).parse_args()
    dim, blocks, tokens, calls = (2048, 8, 256, 16) if CUDA else (32, 3, 8, 2)
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    net = Net(dim, blocks, hook=args.variant != "fullgraph").to(DEVICE, dtype).eval()
    if args.variant is None:
        fn = torch.compile(net)
    elif args.variant == "fullgraph":
        fn = torch.compile(net, fullgraph=True)
    else:
        fn = net
    x = torch.randn(tokens, dim, device=DEVICE, dtype=dtype)
    timer = StepTimer()
    out = x
    total = torch.zeros((), device=DEVICE)
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            for _ in range(calls):
                out, stats = fn(x)
                stats = stats or STATS[-blocks:]
                total = total + torch.stack(stats).sum()
            STATS.clear()
            timer.end()
    timer.report(f"compile_break variant={args.variant or 'baseline'} out {out.float().abs().mean().item():.5f} "
                 f"stats {total.item():.3f}")


if __name__ == "__main__":
    main()
