"""PM2.5 forecasting on 8,192 low-cost sensors whose adaptive-graph Chebyshev convolution forms powers of the adjacency.

An AGCRN / Graph WaveNet-style forecaster for a metropolitan network of 8,192 air-quality sensors
(the last 12 hourly PM2.5 readings in, the next 12 out; 8 windows per step): the graph is learned,
`A = softmax(relu(E @ E.T))` from 16-dimensional node embeddings, and two graph-convolution layers
(64 channels, ReLU, residual) mix each sensor's state with its neighbours' through Chebyshev
polynomials of A up to order 3 (T0 = I, T1 = A, T_k = 2 A T_{k-1} - T_{k-2}), a Linear over the
4 x 64 stacked terms; MAE loss, bf16 autocast, fused AdamW.

Baseline: the supports are built as AGCRN's code builds them, as 8,192 x 8,192 matrices:
`support_set.append(2 * A @ support_set[-1] - support_set[-2])`, stacked with `torch.eye(N)`, then
`torch.einsum("knm,bmc->bknc", supports, x)` in each layer: two square 8,192 x 8,192 x 8,192 GEMMs per
forward (1.1 TFLOP each, four more in the backward) to build matrices that only ever multiply a
signal of 8 x 64 columns, plus a GEMM against the identity.

Variant `recurse_on_signal`: the Chebyshev recursion applied to the signal, as ChebNet does it:
`T1x = A @ x`, `T_k x = 2 A @ T_{k-1} x - T_{k-2} x`: three 8,192 x 8,192 x 512 GEMMs per layer and no
N x N products. The same polynomial terms of the same learned graph, the same layers and updates; the
products are associated differently, so bf16 rounding differs (the loss agrees to two or three
digits).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("recurse_on_signal",)
if CUDA:
    SENSORS, EMBED, CHANNELS, WINDOWS = 8192, 16, 64, 8
else:  # a tiny CPU check of the script
    SENSORS, EMBED, CHANNELS, WINDOWS = 64, 4, 8, 2
STEPS_IN, STEPS_OUT, ORDER, LAYERS, POOL = 12, 12, 4, 2, 4


class ChebForecaster(nn.Module):
    """Learned adjacency, Chebyshev graph convolutions over it, a per-sensor forecast head."""

    def __init__(self, recurse: bool) -> None:
        super().__init__()
        self.recurse = recurse
        self.nodes = nn.Parameter(torch.randn(SENSORS, EMBED))
        self.inp = nn.Linear(STEPS_IN, CHANNELS)
        self.mix = nn.ModuleList(nn.Linear(ORDER * CHANNELS, CHANNELS) for _ in range(LAYERS))
        self.out = nn.Linear(CHANNELS, STEPS_OUT)

    def supports(self, a: torch.Tensor) -> torch.Tensor:
        """Baseline: T0..T3 of A as N x N matrices (AGCRN's support_set)."""
        support_set = [torch.eye(SENSORS, device=a.device), a]
        for _ in range(2, ORDER):
            support_set.append(torch.matmul(2 * a, support_set[-1]) - support_set[-2])
        return torch.stack(support_set, dim=0)

    def terms(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Variant: T0 x .. T3 x by the recursion on the signal; (windows, ORDER, sensors, channels)."""
        flat = x.transpose(0, 1).reshape(SENSORS, -1)  # (sensors, windows * channels)
        xs = [flat, a @ flat]
        for _ in range(2, ORDER):
            xs.append(2 * (a @ xs[-1]) - xs[-2])
        return torch.stack(xs).view(ORDER, SENSORS, x.shape[0], CHANNELS).permute(2, 0, 1, 3)

    def forward(self, readings: torch.Tensor) -> torch.Tensor:
        a = F.softmax(F.relu(self.nodes @ self.nodes.T), dim=1)
        sup = None if self.recurse else self.supports(a)
        x = self.inp(readings)  # (windows, sensors, channels)
        for mix in self.mix:
            xg = self.terms(a, x) if self.recurse else torch.einsum("knm,bmc->bknc", sup, x)
            x = x + F.relu(mix(xg.permute(0, 2, 1, 3).reshape(x.shape[0], SENSORS, ORDER * CHANNELS)))
        return self.out(x)  # (windows, sensors, STEPS_OUT)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ChebForecaster(args.variant == "recurse_on_signal")
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # standardised PM2.5: a diurnal cycle, a regional level per sensor, noise; windows of 24 hours
    hours = torch.arange(STEPS_IN + STEPS_OUT, device=DEVICE, dtype=torch.float32)
    level = torch.randn(POOL, WINDOWS, SENSORS, 1, generator=gen, device=DEVICE)
    phase = torch.rand(POOL, WINDOWS, 1, 1, generator=gen, device=DEVICE) * 24
    series = level + 0.5 * torch.sin((hours + phase) * (2 * torch.pi / 24))
    series = series + 0.2 * torch.randn(series.shape, generator=gen, device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        window = series[i % POOL]
        with bf16():
            forecast = model(window[..., :STEPS_IN])
        return F.l1_loss(forecast.float(), window[..., STEPS_IN:])

    train("air_quality_chebyshev_adjacency_powers", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
