"""A transformer-encoder classifier whose training loop does what many loops do for logging: times
forward and backward with `torch.cuda.synchronize()` around each, reads `loss.item()`, the gradient
norm `.item()` and the batch accuracy from `logits.argmax(-1).cpu()` every step.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/sync_logging.py
Variants: --variant no_timing (the synchronize() timing removed, the .item()/.cpu() reads kept),
--variant gpu_metrics (no timing; loss, grad norm and correct counts accumulated in GPU tensors and
read once at the end). On the GPU: 6 layers, width 512, 8 heads, 64 x 128 tokens, bf16 autocast,
AdamW(fused). Each step ends with tracekit.step().
"""

import time

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def main() -> None:
    args = options(__doc__, ("no_timing", "gpu_metrics")).parse_args()
    dim, heads, layers, batch, seq, classes = (512, 8, 6, 64, 128, 10) if CUDA else (32, 4, 2, 4, 16, 10)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)).to(DEVICE)
    head = nn.Linear(dim, classes).to(DEVICE)
    params = [*model.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if CUDA else {}))
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, classes, (batch,), device=DEVICE)
    log: list[tuple[float, float, float]] = []
    sums = torch.zeros(3, device=DEVICE)
    fwd_ms = bwd_ms = 0.0
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        if args.variant is None:
            sync()
            t0 = time.perf_counter()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            logits = head(model(x).mean(1)).float()
            loss = F.cross_entropy(logits, y)
        if args.variant is None:
            sync()
            t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.variant is None:
            sync()
            fwd_ms += (t1 - t0) * 1e3
            bwd_ms += (time.perf_counter() - t1) * 1e3
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        if args.variant == "gpu_metrics":
            correct = (logits.argmax(-1) == y).sum()
            sums += torch.stack([loss.detach(), gnorm, correct.float()])
        else:
            acc = (logits.argmax(-1).cpu() == y.cpu()).float().mean().item()
            log.append((loss.item(), gnorm.item(), acc))
        timer.end()
    if args.variant == "gpu_metrics":
        total = sums.tolist()
        summary = f"mean loss {total[0] / args.steps:.5f} correct {int(total[2])}"
    else:
        summary = f"mean loss {sum(r[0] for r in log) / len(log):.5f} correct {round(sum(r[2] for r in log) * batch)}"
    timer.report(f"sync_logging variant={args.variant or 'baseline'} {summary} fwd {fwd_ms:.1f} ms bwd {bwd_ms:.1f} ms")


if __name__ == "__main__":
    main()
