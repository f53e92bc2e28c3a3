"""A transformer-encoder classifier trained with `torch.autograd.set_detect_anomaly(True)` left on
from a NaN hunt: autograd records a Python stack trace for every forward op and checks every
backward output for NaN.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/anomaly_mode.py
Variants: --variant off (anomaly detection off), --variant nan_check (off, and a non-finite-loss flag
kept as a GPU tensor, checked once at the end). On the GPU: 4 pre-norm layers, width 512, 8 heads,
32 x 128 tokens, bf16 autocast, AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, encoder, options, train


def main() -> None:
    args = options(__doc__, ("off", "nan_check")).parse_args()
    dim, heads, layers, batch, seq = (512, 8, 4, 32, 128) if CUDA else (32, 4, 2, 4, 16)
    torch.autograd.set_detect_anomaly(args.variant is None)
    torch.manual_seed(0)
    body, head, params = encoder(dim, heads, layers, 10)
    opt = adamw(params)
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, 10, (batch,), device=DEVICE)
    bad = torch.zeros((), device=DEVICE, dtype=torch.bool)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(head(body(x).mean(1)).float(), y)

    def after(loss: torch.Tensor) -> None:
        if args.variant == "nan_check":
            bad.logical_or_(~torch.isfinite(loss.detach()))

    train("anomaly_mode", args.variant, args.steps, opt, loss_of, after)
    if bool(bad.item()):
        raise SystemExit("anomaly_mode: non-finite loss")

if __name__ == "__main__":
    main()
