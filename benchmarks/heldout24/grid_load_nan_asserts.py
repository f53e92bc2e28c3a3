"""Grid-load forecasting service: a PatchTST-style transformer whose forward asserts finiteness after every sub-layer.

A regional operator forecasts the next 96 quarter-hours of load for 32 substations per request from
their last 4,096 readings (patches of 16: 256 tokens of width 512, 24 pre-norm blocks, 8 heads,
SDPA, GELU MLPs, bf16 weights, inference).
Baseline: the model guards itself against bad telemetry with
`if torch.isnan(h).any() or torch.isinf(h).any(): raise ...` after the attention and the MLP of every
block and after the patch embedding, and the service checks the forecast: 50 checks per request,
each two reductions and two `bool(tensor)` reads, i.e. 100 device synchronisations per request. At
each one the host waits for the GPU to drain, and the GPU then waits for the host to launch the next
kernels.
Variant `output_check_only`: one check, on the forecast; non-finite values propagate to the output,
so a bad input still raises, with two synchronisations per request.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("output_check_only",)
STATIONS, HISTORY, PATCH, HORIZON = (32, 4096, 16, 96) if CUDA else (4, 256, 16, 96)
DIM, HEADS, LAYERS = (512, 8, 24) if CUDA else (64, 4, 3)
DTYPE = torch.bfloat16 if CUDA else torch.float32


def check_finite(t: torch.Tensor, where: str) -> None:
    """Raise on NaN or inf (the usual `assert not torch.isnan(x).any()` guard)."""
    if torch.isnan(t).any() or torch.isinf(t).any():
        raise FloatingPointError(f"non-finite values after {where}")


class Block(nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, guard: bool) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        if guard:
            check_finite(x, f"block {self.index} attention")
        x = x + self.down(F.gelu(self.up(self.n2(x))))
        if guard:
            check_finite(x, f"block {self.index} mlp")
        return x


class LoadForecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        tokens = HISTORY // PATCH
        self.embed = nn.Linear(PATCH, DIM)
        self.pos = nn.Parameter(torch.randn(tokens, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(i) for i in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(tokens * DIM // 8, HORIZON)
        self.squeeze = nn.Linear(DIM, DIM // 8)

    def forward(self, readings: torch.Tensor, guard: bool) -> torch.Tensor:
        mean = readings.mean(-1, keepdim=True)
        std = readings.std(-1, keepdim=True) + 1e-3
        x = self.embed(((readings - mean) / std).unflatten(-1, (-1, PATCH))) + self.pos
        if guard:
            check_finite(x, "patch embedding")
        for blk in self.blocks:
            x = blk(x, guard)
        y = self.head(self.squeeze(self.norm(x)).flatten(1))
        return y * std + mean


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LoadForecaster().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    t = torch.arange(HISTORY, device=DEVICE, dtype=torch.float32)
    requests = []
    for _ in range(4):  # daily and weekly cycles, a per-station level and noise, in MW
        level = 50 + 30 * torch.rand(STATIONS, 1, generator=gen, device=DEVICE)
        phase = 6.28 * torch.rand(STATIONS, 1, generator=gen, device=DEVICE)
        load = level * (1 + 0.3 * torch.sin(6.2832 * t / 96 + phase) + 0.1 * torch.sin(6.2832 * t / 672))
        load = load + torch.randn(STATIONS, HISTORY, generator=gen, device=DEVICE)
        requests.append(load.to(DTYPE))
    guard_layers = args.variant is None
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            forecast = model(requests[i % len(requests)], guard_layers)
            check_finite(forecast, "forecast")
            total += forecast.float().mean()
            timer.end()
    timer.report(f"grid_load_nan_asserts variant={args.variant or 'baseline'} "
                 f"mean forecast {total.item() / args.steps:.4f} MW")


if __name__ == "__main__":
    main()
