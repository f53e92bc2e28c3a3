"""A residual MLP trained with a hand-written Muon optimizer (momentum, then a 5-step Newton-Schulz
orthogonalisation of each 2-D weight's update), the Newton-Schulz iterations run in float32, one
weight at a time.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/muon_fp32.py
Variants: --variant bf16 (the Newton-Schulz iterations in bfloat16, as the reference Muon does),
--variant batched (bf16, and the same-shaped weights stacked so each iteration is one `bmm` over
all of them). Same hyper-parameters and initial weights (bf16 rounds differently). On the GPU: 16
blocks of LayerNorm + Linear(2048, 2048) + GELU + Linear(2048, 2048) (32 matrices), 4096 tokens,
bf16 autocast forward; norms and biases updated by AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

LR, MOMENTUM, NS_STEPS = 0.02, 0.95, 5
A, B, C = 3.4445, -4.7750, 2.0315


def newton_schulz(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The quintic Newton-Schulz iteration towards the orthogonal factor of `g` (last two dims)."""
    x = g.to(dtype)
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(NS_STEPS):
        a = x @ x.mT
        b = B * a + C * a @ a
        x = A * x + b @ x
    return x.to(g.dtype)


class Muon:
    """SGD-momentum with Nesterov, the update orthogonalised per matrix; other tensors use AdamW."""

    def __init__(self, matrices: list[nn.Parameter], others: list[nn.Parameter], dtype: torch.dtype, batched: bool) -> None:
        self.matrices, self.dtype, self.batched = matrices, dtype, batched
        self.buf = [torch.zeros_like(p) for p in matrices]
        self.rest = adamw(others)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.matrices:
            p.grad = None
        self.rest.zero_grad(set_to_none=True)

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad for p in self.matrices]
        torch._foreach_mul_(self.buf, MOMENTUM)
        torch._foreach_add_(self.buf, grads)
        nesterov = torch._foreach_add(grads, self.buf, alpha=MOMENTUM)
        if self.batched:
            updates = list(newton_schulz(torch.stack(nesterov), self.dtype).unbind(0))
        else:
            updates = [newton_schulz(u, self.dtype) for u in nesterov]
        torch._foreach_add_(self.matrices, updates, alpha=-LR)
        self.rest.step()


def main() -> None:
    args = options(__doc__, ("bf16", "batched")).parse_args()
    dim, blocks, tokens = (2048, 16, 4096) if CUDA else (32, 3, 64)
    torch.manual_seed(0)
    model = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim)) for _ in range(blocks)).to(DEVICE)
    matrices = [p for p in model.parameters() if p.ndim == 2]
    others = [p for p in model.parameters() if p.ndim != 2]
    dtype = torch.float32 if args.variant is None else torch.bfloat16
    opt = Muon(matrices, others, dtype, batched=args.variant == "batched")
    x = torch.randn(tokens, dim, device=DEVICE)
    target = torch.randn(tokens, dim, device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            h = x
            for block in model:
                h = h + block(h)
            return F.mse_loss(h.float(), target)

    train("muon_fp32", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
