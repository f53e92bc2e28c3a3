"""KAN regression whose `torch.compile(fullgraph=True)` fails on a warning in forward and silently falls back to eager.

torch.compile. A Kolmogorov-Arnold network (efficient-KAN style `KANLinear` layers 64 -> 256 ->
256 -> 16: a SiLU base branch plus cubic B-spline bases on an 8-interval grid, the bases built by
the Cox-de Boor recursion over (batch, inputs, grid) tensors), float32, MSE against a fixed smooth
target, fused AdamW, 8,192 samples per step. The script opts into compilation framework-style:
`torch.compile(model, fullgraph=True)` is tried on the first batch and any exception keeps the eager
model. Each `KANLinear.forward` calls `warnings.warn(...)` about a deprecated argument (`grid_eps`)
that the configuration still passes; dynamo cannot trace `warnings.warn`, so the fullgraph attempt
raises at the first call and the whole run stays eager: ~25 unfused elementwise kernels per layer
over 117 MB float32 tensors, forward and backward.

Variant `compiled`: the deprecation warning is issued once, in `__init__`; the same
`torch.compile(model, fullgraph=True)` then succeeds (one inductor graph, forward and backward).
"""

import itertools
import sys
import warnings

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

VARIANTS = ("compiled",)
if CUDA:
    BATCH, WIDTHS = 8192, (64, 256, 256, 16)
else:
    BATCH, WIDTHS = 256, (8, 32, 32, 4)
GRID, ORDER = 8, 3


class KANLinear(nn.Module):
    """y = W_base silu(x) + sum_j c_j B_j(x) per (output, input) pair, B-spline bases on a fixed grid."""

    def __init__(self, fin: int, fout: int, grid_eps: float | None, warn_in_forward: bool) -> None:
        super().__init__()
        h = 2.0 / GRID
        grid = torch.arange(-ORDER, GRID + ORDER + 1, dtype=torch.float32) * h - 1.0
        self.register_buffer("grid", grid.expand(fin, -1).contiguous())
        self.fin, self.fout = fin, fout
        self.grid_eps = grid_eps  # accepted for old configs, no longer used
        self.warn_in_forward = warn_in_forward
        if grid_eps is not None and not warn_in_forward:
            warnings.warn("KANLinear: grid_eps is deprecated and ignored", DeprecationWarning, stacklevel=2)
        self.base_weight = nn.Parameter(torch.randn(fout, fin) / fin**0.5)
        self.spline_weight = nn.Parameter(torch.randn(fout, fin, GRID + ORDER) * (0.1 / fin**0.5))
        self.spline_scaler = nn.Parameter(torch.ones(fout, fin))

    def b_splines(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, in) -> (batch, in, GRID + ORDER) cubic B-spline bases (Cox-de Boor)."""
        g = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= g[:, :-1]) & (x < g[:, 1:])).to(x.dtype)
        for k in range(1, ORDER + 1):
            bases = (x - g[:, : -(k + 1)]) / (g[:, k:-1] - g[:, : -(k + 1)]) * bases[:, :, :-1] + (
                g[:, k + 1 :] - x
            ) / (g[:, k + 1 :] - g[:, 1:(-k)]) * bases[:, :, 1:]
        return bases

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.warn_in_forward and self.grid_eps is not None:
            warnings.warn("KANLinear: grid_eps is deprecated and ignored", DeprecationWarning, stacklevel=2)
        base = F.linear(F.silu(x), self.base_weight)
        coef = (self.spline_weight * self.spline_scaler.unsqueeze(-1)).view(self.fout, -1)
        return base + F.linear(self.b_splines(x).view(x.size(0), -1), coef)


def compile_or_eager(model: nn.Module, example: torch.Tensor) -> tuple[nn.Module, bool]:
    """Framework-style opt-in: a fullgraph compile tried on one batch; on any error, the eager model."""
    try:
        compiled = torch.compile(model, fullgraph=True)
        compiled(example)
    except Exception as exc:
        print(f"torch.compile skipped ({type(exc).__name__}); running eagerly", file=sys.stderr)
        return model, False
    return compiled, True


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    torch.manual_seed(0)
    warn_in_forward = args.variant != "compiled"
    layers = [KANLinear(a, b, grid_eps=0.02, warn_in_forward=warn_in_forward) for a, b in itertools.pairwise(WIDTHS)]
    model = nn.Sequential(*layers).to(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    pool = 4
    xs = torch.rand(pool, BATCH, WIDTHS[0], device=DEVICE, generator=gen) * 2 - 1
    proj = torch.randn(WIDTHS[0], WIDTHS[-1], device=DEVICE, generator=gen) / WIDTHS[0] ** 0.5
    ys = torch.sin(3.0 * xs @ proj)
    net, compiled = compile_or_eager(model, xs[0])
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        return F.mse_loss(net(xs[i % pool]), ys[i % pool])

    train(f"kan_compile_fallback compiled={compiled}", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
