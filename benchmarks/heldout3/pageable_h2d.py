"""An MLP classifier on wide float32 feature batches kept in host memory and uploaded every step with
a plain `batch.to("cuda")` from pageable memory.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/pageable_h2d.py
Variants: --variant pinned (the host batches pinned once, `.to(non_blocking=True)`), --variant
prefetch (pinned, and the next batch copied on a side stream while the current one trains). On the
GPU: 4 host batches of 2048 x 8192 fp32 (64 MiB each), MLP 8192 -> 4096 -> 4096 -> 10, bf16 autocast,
AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn


def main() -> None:
    args = options(__doc__, ("pinned", "prefetch")).parse_args()
    batch, feat, hidden, nbatch = (2048, 8192, 4096, 4) if CUDA else (16, 64, 32, 4)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(feat, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 10)).to(DEVICE)
    opt = adamw(list(model.parameters()))
    data = [torch.randn(batch, feat) for _ in range(nbatch)]
    labels = [torch.randint(0, 10, (batch,)) for _ in range(nbatch)]
    pinned = args.variant is not None and CUDA
    if pinned:
        data = [d.pin_memory() for d in data]
        labels = [y.pin_memory() for y in labels]
    side = torch.cuda.Stream() if CUDA and args.variant == "prefetch" else None

    def upload(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return data[i % nbatch].to(DEVICE, non_blocking=pinned), labels[i % nbatch].to(DEVICE, non_blocking=pinned)

    nxt = None
    if side is not None:
        with torch.cuda.stream(side):
            nxt = upload(0)
    def loss_of(i: int) -> torch.Tensor:
        nonlocal nxt
        if side is not None and nxt is not None:
            main_stream = torch.cuda.current_stream()
            main_stream.wait_stream(side)
            x, y = nxt
            x.record_stream(main_stream)
            y.record_stream(main_stream)
            with torch.cuda.stream(side):
                nxt = upload(i + 1)
        else:
            x, y = upload(i)
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(model(x).float(), y)

    train("pageable_h2d", args.variant, args.steps, opt, loss_of)

if __name__ == "__main__":
    main()
