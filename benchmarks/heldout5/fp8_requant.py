"""FP8 inference of a stack of GELU FFN blocks whose Linear layers quantise their bf16 weights to float8 on every call.

`Fp8Linear.forward` computes the weight's per-tensor scale (amax / 448), divides, casts to
float8_e4m3fn, quantises the activation the same way and calls `torch._scaled_mm` (bf16 out). 4
blocks of Linear 4096 -> 14336, GELU, Linear 14336 -> 4096 with a residual; 16 micro-batches of 512
tokens per step, inference mode. Variants: `prequant` (the same float8 weights and scales computed
once at load; the activations still quantised per call), `bf16` (plain bf16 `F.linear`, no float8).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("prequant", "bf16")
DIM, FFN, BLOCKS, TOKENS, CALLS = (4096, 14336, 4, 512, 16) if CUDA else (64, 128, 2, 32, 3)
F8 = torch.float8_e4m3fn
F8_MAX = 448.0


def quantise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor float8 e4m3: (t / scale) in float8 and the float32 scale, scale = amax / 448."""
    scale = (t.abs().amax().float() / F8_MAX).clamp(min=1e-12)
    return (t / scale.to(t.dtype)).to(F8), scale


class Fp8Linear(nn.Module):
    """Linear with bf16 weights that runs as float8 x float8 -> bf16; `prequant` keeps the float8 weight."""

    def __init__(self, cin: int, cout: int, variant: str | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin) * cin**-0.5, requires_grad=False)
        self.variant = variant
        self.w8: torch.Tensor | None = None
        self.w_scale: torch.Tensor | None = None

    def prepare(self) -> None:
        """Quantise the weight once (variant `prequant`)."""
        if self.variant == "prequant":
            self.w8, self.w_scale = quantise(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.variant == "bf16":
            return F.linear(x, self.weight)
        w8, w_scale = (self.w8, self.w_scale) if self.w8 is not None else quantise(self.weight)
        x8, x_scale = quantise(x)
        return torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=torch.bfloat16)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    blocks = [nn.ModuleList([Fp8Linear(DIM, FFN, args.variant), Fp8Linear(FFN, DIM, args.variant)]) for _ in range(BLOCKS)]
    model = nn.ModuleList(blocks).to(DEVICE, torch.bfloat16)
    for m in model.modules():
        if isinstance(m, Fp8Linear):
            m.prepare()
    inputs = torch.randn(CALLS, TOKENS, DIM, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1)).to(torch.bfloat16)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            for c in range(CALLS):
                x = inputs[c]
                for up, down in model:  # type: ignore[misc]
                    x = x + down(F.gelu(up(x)))
                total += x.float().square().mean()
            timer.end()
    timer.report(f"fp8_requant variant={args.variant or 'baseline'} mean square {total.item() / (args.steps * CALLS):.6f}")


if __name__ == "__main__":
    main()
