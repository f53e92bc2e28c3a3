"""A stack of feed-forward blocks with odd sizes (model width 4095, FFN width 11007) trained under
bf16 autocast: every GEMM has an odd leading dimension, so cuBLAS cannot use its 16-byte-aligned
kernels.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/misaligned_ffn.py
Variants: --variant pad_ffn (FFN width padded to 11008, model width still 4095), --variant pad_all
(width 4096 and FFN 11008). On the GPU: 3 blocks (RMS-style norm, Linear up, SiLU, Linear down),
4096 tokens, SGD. The padded sizes add < 0.03 % FLOPs. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(dim, ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x + self.down(F.silu(self.up(h)))


def main() -> None:
    args = options(__doc__, ("pad_ffn", "pad_all")).parse_args()
    dim, ffn = {None: (4095, 11007), "pad_ffn": (4095, 11008), "pad_all": (4096, 11008)}[args.variant]
    blocks, tokens = (3, 4096) if CUDA else (2, 8)
    if not CUDA:
        dim, ffn = dim // 64, ffn // 64
    torch.manual_seed(0)
    with torch.device(DEVICE):  # initialised on the device: 270M weights are slow to initialise on the CPU
        model = nn.Sequential(*[Block(dim, ffn) for _ in range(blocks)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(tokens, dim, device=DEVICE)
    timer = StepTimer()
    loss = torch.zeros(())
    for _ in range(args.steps):
        timer.tick()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"misaligned_ffn variant={args.variant or 'baseline'} dim {dim} ffn {ffn} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
