"""Orthogonal-RNN training whose parametrized recurrent weight is recomputed at every time step.

Workload: training an expRNN-style orthogonal recurrent classifier on row-by-row images (28 rows of
28 pixels, 10 classes; Lezcano-Casado and Martinez-Rubio's "exponential RNN" set-up), batch 128
from a GPU-resident pool: input projection 28 -> 512, a 512 x 512 recurrent kernel kept orthogonal
by `torch.nn.utils.parametrizations.orthogonal` (its default map for a square matrix:
`matrix_exp` of the skew-symmetric part, with the dynamic-trivialization base), modReLU, a readout
on the last state; cross-entropy, float32, fused AdamW. The loop runs the cell 28 times per forward,
and each `self.rec(h)` reads `self.rec.weight`, so the parametrization runs again at every time
step: 28 skew-symmetrisations, matrix exponentials of 512 x 512 (each with a host read of the
matrix norm that picks the approximation degree) and base products in the forward, and 28
matrix-exponential backwards (a matrix exponential of a 1,024 x 1,024 block matrix each) in the
backward, where one of each would do: the weight is the same at every step.

Variant `cached_weight`: the forward runs inside `torch.nn.utils.parametrize.cached()`, the context
manager PyTorch documents for "the recurrent kernel of an RNN" (`with P.cached(): output =
model(inputs)`): the orthogonal weight is computed once per forward and reused by all 28 steps; the
backward accumulates their gradients into that one weight and differentiates the matrix exponential
once. The same losses and updates (up to summation order).

No extra variant.
"""

import torch
import torch.nn.functional as F
import torch.nn.utils.parametrize as P
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn
from torch.nn.utils.parametrizations import orthogonal

if CUDA:
    BATCH, ROWS, COLS, HIDDEN, POOL = 128, 28, 28, 512, 2048
else:
    BATCH, ROWS, COLS, HIDDEN, POOL = 4, 6, 8, 16, 16
CLASSES = 10


class ModReLU(nn.Module):
    """expRNN's nonlinearity: sign(z) * relu(|z| + b)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.empty(features).uniform_(-0.01, 0.01))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sign(z) * F.relu(torch.abs(z) + self.b)


class OrthogonalRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(COLS, HIDDEN)
        self.rec = nn.Linear(HIDDEN, HIDDEN, bias=False)
        nn.init.orthogonal_(self.rec.weight)
        orthogonal(self.rec, "weight")  # matrix_exp map, use_trivialization=True
        self.act = ModReLU(HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, ROWS, COLS) read one row per step -> logits (B, CLASSES)."""
        u = self.inp(images)  # every row's input projection at once
        h = images.new_zeros(images.shape[0], HIDDEN)
        for t in range(ROWS):
            h = self.act(u[:, t] + self.rec(h))  # reads the parametrized weight
        return self.out(h)


def main() -> None:
    args = options(__doc__, ("cached_weight",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = OrthogonalRNN()
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randn(POOL, ROWS, COLS, device=DEVICE, generator=gen)
    pool_labels = torch.randint(0, CLASSES, (POOL,), device=DEVICE, generator=gen)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    correct = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    for step in range(args.steps):
        timer.tick()
        first = (step * BATCH) % POOL
        x, y = pool[first:first + BATCH], pool_labels[first:first + BATCH]
        if args.variant == "cached_weight":
            with P.cached():
                logits = model(x)
        else:
            logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        correct += (logits.argmax(-1) == y).sum()
        timer.end()
    timer.report(f"exprnn_uncached_orth variant={args.variant or 'baseline'} mean loss "
                 f"{total.item() / args.steps:.5f} correct {correct.item()}")


if __name__ == "__main__":
    main()
