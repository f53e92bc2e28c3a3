"""N-BEATS forecaster training with a hand-copied gradient clipping helper (a loop over the parameters).

Workload: the generic N-BEATS architecture (30 blocks of four ReLU Linear layers of width 512 with a
backcast and a forecast head; 360 parameter tensors, 35M weights) trained on windows of synthetic
seasonal series: 336 steps of history, 48 steps of horizon, 1,024 windows per step, inputs scaled by
their mean absolute value, L1 loss, `torch.optim.Adam(lr=1e-3)` (its default foreach path), TF32
matmuls (`set_float32_matmul_precision("high")`). Between backward and the optimizer step the
gradients are clipped to a global L2 norm of 1.0 by `clip_gradients`, a helper copied from an older
codebase: one `torch.norm` per gradient, a norm of the stacked norms, and one `mul_` per gradient.

Variant `clip_grad_norm`: `torch.nn.utils.clip_grad_norm_(params, 1.0)` (the same formula: the
global norm, `max_norm / (norm + 1e-6)` clamped at 1, every gradient scaled by it).

Variant `cuda_graph` (added after the first GPU run, to measure that run's first suggestion): the
baseline's step (forward, backward, the same `clip_gradients` loop, Adam with `capturable=True`)
captured once in a CUDA graph and replayed; the windows are sampled eagerly and copied into the
graph's static inputs. Three warm-up steps on a side stream precede the capture.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

torch.set_float32_matmul_precision("high")

if CUDA:
    BACKCAST, HORIZON, WIDTH, BLOCKS, BATCH, SERIES, LENGTH = 336, 48, 512, 30, 1024, 4096, 2048
else:
    BACKCAST, HORIZON, WIDTH, BLOCKS, BATCH, SERIES, LENGTH = 28, 4, 32, 6, 16, 64, 256


class NBeatsBlock(nn.Module):
    """Generic block: a ReLU MLP over the residual input, then linear backcast and forecast heads."""

    def __init__(self, backcast: int, horizon: int, width: int, layers: int = 4) -> None:
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(backcast, width)] + [nn.Linear(width, width) for _ in range(layers - 1)])
        self.backcast_head = nn.Linear(width, backcast)
        self.forecast_head = nn.Linear(width, horizon)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x
        for fc in self.fc:
            h = F.relu(fc(h))
        return self.backcast_head(h), self.forecast_head(h)


class NBeats(nn.Module):
    """Doubly residual stack: each block removes its backcast from the input and adds its forecast."""

    def __init__(self, backcast: int, horizon: int, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(NBeatsBlock(backcast, horizon, width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x.flip(-1)
        forecast = 0.0
        for block in self.blocks:
            back, fore = block(residual)
            residual = residual - back
            forecast = forecast + fore
        return forecast  # type: ignore[return-value]


def clip_gradients(parameters: list[nn.Parameter], max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Scale the gradients in place so that their global norm is at most `max_norm`; return the norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.norm(torch.stack([torch.norm(g.detach(), norm_type) for g in grads]), norm_type)
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for g in grads:
        g.detach().mul_(clip_coef_clamped)
    return total_norm


def make_series(gen: torch.Generator) -> torch.Tensor:
    """Seasonal series (daily and weekly cycles of random phase and amplitude, a trend, noise), positive."""
    t = torch.arange(LENGTH, device=DEVICE, dtype=torch.float32)
    amp = torch.rand(SERIES, 3, device=DEVICE, generator=gen)
    phase = torch.rand(SERIES, 2, device=DEVICE, generator=gen) * 6.2832
    level = 10.0 + 40.0 * torch.rand(SERIES, 1, device=DEVICE, generator=gen)
    daily = amp[:, :1] * torch.sin(t * (6.2832 / 24) + phase[:, :1])
    weekly = amp[:, 1:2] * torch.sin(t * (6.2832 / 168) + phase[:, 1:2])
    trend = amp[:, 2:] * t / LENGTH
    noise = 0.1 * torch.randn(SERIES, LENGTH, device=DEVICE, generator=gen)
    return level * (1.0 + 0.3 * daily + 0.2 * weekly + 0.5 * trend + noise)


def capture(model: nn.Module, params: list[nn.Parameter], opt: torch.optim.Optimizer, x: torch.Tensor,
            y: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]:
    """The training step captured in a CUDA graph: (graph, (static x, static y, loss, grad norm))."""
    sx, sy = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.l1_loss(model(sx), sy).backward()
            clip_gradients(params, 1.0)
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = F.l1_loss(model(sx), sy)
        loss.backward()
        norm = clip_gradients(params, 1.0)
        opt.step()
    return graph, (sx, sy, loss, norm)


def main() -> None:
    args = options(__doc__, ("clip_grad_norm", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = NBeats(BACKCAST, HORIZON, WIDTH, BLOCKS)
    params = list(model.parameters())
    graphed = args.variant == "cuda_graph" and CUDA
    opt = torch.optim.Adam(params, lr=1e-3, capturable=graphed)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    series = make_series(gen)
    offsets = torch.arange(BACKCAST + HORIZON, device=DEVICE)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    norms = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    graph: torch.cuda.CUDAGraph | None = None
    static: tuple[torch.Tensor, ...] = ()
    for _ in range(args.steps):
        timer.tick()
        rows = torch.randint(0, SERIES, (BATCH,), device=DEVICE, generator=gen)
        starts = torch.randint(0, LENGTH - BACKCAST - HORIZON, (BATCH,), device=DEVICE, generator=gen)
        window = series[rows[:, None], starts[:, None] + offsets]
        x, y = window[:, :BACKCAST], window[:, BACKCAST:]
        scale = x.abs().mean(-1, keepdim=True)
        if graphed:
            if graph is None:
                graph, static = capture(model, params, opt, x / scale, y / scale)
            static[0].copy_(x / scale)
            static[1].copy_(y / scale)
            graph.replay()
            total += static[2].detach()
            norms += static[3].detach()
            timer.end()
            continue
        loss = F.l1_loss(model(x / scale), y / scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.variant == "clip_grad_norm":
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        else:
            norm = clip_gradients(params, 1.0)
        opt.step()
        total += loss.detach()
        norms += norm.detach()
        timer.end()
    timer.report(f"nbeats_clip_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"mean grad norm {norms.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
