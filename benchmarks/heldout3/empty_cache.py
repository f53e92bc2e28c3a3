"""A transformer-encoder classifier whose training loop ends every step the way many "avoid OOM"
snippets do: `del` the step's tensors, `gc.collect()`, `torch.cuda.empty_cache()`.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/empty_cache.py
Variants: --variant no_empty_cache (gc.collect() kept, empty_cache() removed), --variant neither
(both removed). On the GPU: 6 pre-norm layers, width 1024, 16 heads, 32 x 256 tokens, bf16 autocast,
AdamW(fused). Each step ends with tracekit.step().
"""

import gc

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, encoder, options, train


def main() -> None:
    args = options(__doc__, ("no_empty_cache", "neither")).parse_args()
    dim, heads, layers, batch, seq = (1024, 16, 6, 32, 256) if CUDA else (32, 4, 2, 4, 16)
    torch.manual_seed(0)
    body, head, params = encoder(dim, heads, layers, 100)
    opt = adamw(params)
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, 100, (batch,), device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(head(body(x).mean(1)).float(), y)

    def after(loss: torch.Tensor) -> None:  # runs after backward and the optimizer step
        if args.variant != "neither":
            gc.collect()
        if args.variant is None and CUDA:
            torch.cuda.empty_cache()

    train("empty_cache", args.variant, args.steps, opt, loss_of, after)

if __name__ == "__main__":
    main()
