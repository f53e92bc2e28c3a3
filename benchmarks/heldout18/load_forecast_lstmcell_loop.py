"""Training of a day-ahead electricity-load forecaster: a 2-layer LSTM (hidden 256) reads one week of
hourly readings (168 steps x 32 features: load, weather, calendar) for 1,024 substations, and a linear
head predicts the next 24 hours (fp32, MSE loss).

Baseline: the recurrence written as a Python loop over the 168 hours with two `nn.LSTMCell`s: per
hour and layer a few small kernels (two GEMMs of 1,024 x 1,024, the fused cell), ~1,000 forward and
~2,000 backward launches per step, each finished by the GPU long before the next is issued.
Variant `cudnn_lstm`: one `nn.LSTM(num_layers=2, batch_first=True)` holding the same weights (the
cells' `weight_ih`/`weight_hh`/`bias_ih`/`bias_hh` are its `_l0`/`_l1` tensors): cuDNN runs the
whole sequence in a few kernels. Same function; fp32 rounding may differ (cuDNN's own GEMMs, which
may use TF32 by the default `torch.backends.cudnn.allow_tf32`)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, adamw, options, train

B, HOURS, FEATS, HIDDEN = (1024, 168, 32, 256) if CUDA else (8, 12, 8, 16)
AHEAD, BATCHES = 24, 4


class CellForecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTMCell(FEATS, HIDDEN), nn.LSTMCell(HIDDEN, HIDDEN)])
        self.head = nn.Linear(HIDDEN, AHEAD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = [x.new_zeros(x.shape[0], HIDDEN) for _ in self.cells]
        c = [x.new_zeros(x.shape[0], HIDDEN) for _ in self.cells]
        for t in range(x.shape[1]):
            inp = x[:, t]
            for layer, cell in enumerate(self.cells):
                h[layer], c[layer] = cell(inp, (h[layer], c[layer]))
                inp = h[layer]
        return self.head(h[-1])


class CudnnForecaster(nn.Module):
    def __init__(self, cells: CellForecaster) -> None:
        super().__init__()
        self.lstm = nn.LSTM(FEATS, HIDDEN, num_layers=2, batch_first=True)
        with torch.no_grad():
            for layer, cell in enumerate(cells.cells):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(self.lstm, f"{name}_l{layer}").copy_(getattr(cell, name))
        self.head = cells.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def main() -> None:
    args = options(__doc__ or "", ("cudnn_lstm",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model: nn.Module = CellForecaster()
        if args.variant == "cudnn_lstm":
            model = CudnnForecaster(model)
        gen = torch.Generator(DEVICE).manual_seed(1)
        hours = torch.arange(HOURS + AHEAD, dtype=torch.float32)
        daily = torch.sin(hours * (2 * torch.pi / 24))
        load = daily + 0.3 * torch.randn(BATCHES, B, HOURS + AHEAD, generator=gen)
        extra = torch.randn(BATCHES, B, HOURS, FEATS - 1, generator=gen)
        x = torch.cat([load[..., :HOURS, None], extra], -1)
        y = load[..., HOURS:]
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        return F.mse_loss(model(x[i % BATCHES]), y[i % BATCHES])

    train("load_forecast_lstmcell_loop", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
