"""A transformer classifier trained with gradient accumulation over tiny micro-batches (4 sequences
each, 64 backward passes per optimizer step), a setting carried over from a smaller GPU although the
whole batch fits in memory here.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/micro_batches.py
Variants: --variant micro32 (8 micro-batches of 32), --variant full (the 256 sequences in one
forward/backward). Same weights, data and gradient (each micro-batch loss scaled by its share of
the batch; no batch-dependent layers). On the GPU: 6-layer pre-norm `nn.TransformerEncoder` (width
768, 12 heads), 256 sequences of 128 tokens per optimizer step, bf16 autocast, AdamW(fused). Each
step (one optimizer step) ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, encoder, options


def main() -> None:
    args = options(__doc__, ("micro32", "full")).parse_args()
    dim, heads, layers, batch, seq, classes = (768, 12, 6, 256, 128, 1000) if CUDA else (32, 4, 2, 16, 8, 10)
    micro = {None: 4, "micro32": 32, "full": batch}[args.variant] if CUDA else {None: 2, "micro32": 8, "full": batch}[args.variant]
    torch.manual_seed(0)
    body, head, params = encoder(dim, heads, layers, classes)
    opt = adamw(params)
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, classes, (batch,), device=DEVICE)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        opt.zero_grad(set_to_none=True)
        for start in range(0, batch, micro):
            xs, ys = x[start:start + micro], y[start:start + micro]
            with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
                loss = F.cross_entropy(head(body(xs).mean(1)).float(), ys) * (len(ys) / batch)
            loss.backward()
            total += loss.detach()
        opt.step()
        timer.end()
    timer.report(f"micro_batches variant={args.variant or 'baseline'} micro-batch {micro} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
