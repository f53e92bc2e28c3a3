"""Traffic-speed rollout with a `mode="reduce-overhead"` forecaster whose forward standardises its input in place.

Freeway traffic forecasting (METR-LA / PEMS-BAY-style loop detectors): 16 scenarios x 256 sensors,
the last 12 five-minute speed readings per sensor in, the next 3 out; a spatial transformer (per-sensor
projection + learned sensor embedding, 6 pre-norm blocks of width 256 attending across sensors, 8 heads,
SDPA, bf16 weights, inference) compiled with `torch.compile(model, mode="reduce-overhead")` for its
small, launch-bound forward. Each step rolls the forecast 8 times (3 steps each, 2 hours ahead): each
call gets a fresh `torch.cat` of the last 12 steps of the history (observed, then forecast).

Baseline: the forward begins with `x.sub_(self.mean).div_(self.std)`, standardising the caller's
tensor in place (harmless here: the rollout never reads it again). The compiled graph therefore
mutates one of its inputs, and CUDA-graph trees skip graphs for mutated non-static inputs ("skipping
cudagraphs due to mutated inputs"): every call runs inductor's kernels one launch at a time, ~60
launches from the Python wrapper for ~0.3 ms of GPU work.

Variant `out_of_place_norm`: `x = (x - self.mean) / self.std`: the same arithmetic into a new
tensor, no input mutation, so each call replays one CUDA graph.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

NAME = "traffic_rollout_compiled_inplace_norm"
VARIANTS = ("out_of_place_norm",)

if CUDA:
    SCEN, SENSORS, DIM, HEADS, DEPTH = 16, 256, 256, 8, 6
else:  # tiny check of the script on the CPU
    SCEN, SENSORS, DIM, HEADS, DEPTH = 2, 16, 32, 4, 2
WINDOW, HORIZON, ROLLOUTS, POOL = 12, 3, 8, 4


class Block(nn.Module):
    """Pre-norm attention across sensors and a GELU MLP (defined here: Dynamo must import what it traces)."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class SpeedForecaster(nn.Module):
    def __init__(self, inplace_norm: bool) -> None:
        super().__init__()
        self.inplace_norm = inplace_norm
        self.register_buffer("mean", 55.0 + 5.0 * torch.randn(SENSORS, 1))
        self.register_buffer("std", 10.0 + torch.rand(SENSORS, 1))
        self.inp = nn.Linear(WINDOW, DIM)
        self.sensor = nn.Parameter(torch.randn(SENSORS, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.out = nn.Linear(DIM, HORIZON)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace_norm:
            x.sub_(self.mean).div_(self.std)
        else:
            x = (x - self.mean) / self.std
        h = self.inp(x) + self.sensor
        for blk in self.blocks:
            h = blk(h)
        return self.out(self.norm(h)) * self.std + self.mean


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = SpeedForecaster(inplace_norm=args.variant != "out_of_place_norm").to(dtype).eval()
    forecast = torch.compile(model, mode="reduce-overhead")

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    observed = (55.0 + 12.0 * torch.randn(POOL, SCEN, SENSORS, WINDOW, generator=gen, device=DEVICE)).to(dtype)

    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            history = list(observed[i % POOL].split(HORIZON, -1))
            for _ in range(ROLLOUTS):
                x = torch.cat(history[-WINDOW // HORIZON:], -1)
                history.append(forecast(x).clone())  # clone: CUDA-graph outputs are reused by the next replay
            total += torch.cat(history[WINDOW // HORIZON:], -1).double().sum()
            timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} forecast speed sum {total.item():.4f}")


if __name__ == "__main__":
    main()
