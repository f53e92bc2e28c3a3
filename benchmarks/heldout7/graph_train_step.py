"""Residual-MLP regressor on tabular features, small enough that eager training is bound by kernel launches.

Input Linear(64 -> 384), 24 pre-norm residual blocks (LayerNorm, Linear 384 -> 1536, GELU, Linear
1536 -> 384), LayerNorm, Linear(384 -> 1); batch 1,024, float32, MSE, fused AdamW (lr 1e-4): ~400
kernels per step of a few microseconds each. Baseline: the usual eager step (forward, `zero_grad`,
`backward`, `opt.step()`). Variant `cuda_graph`: the whole step (forward, loss, backward, fused AdamW
with `capturable=True`) captured once in a `torch.cuda.CUDAGraph` after three warm-up steps on a side
stream (the weights and the optimizer state are restored after them, so the trained values are the
baseline's); each step copies the batch into the static inputs and replays the graph. On the CPU the
variant runs the same step eagerly.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ResMLP(nn.Module):
    def __init__(self, feat: int, dim: int, depth: int) -> None:
        super().__init__()
        self.inp = nn.Linear(feat, dim)
        self.blocks = nn.Sequential(*(Block(dim) for _ in range(depth)))
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.blocks(self.inp(x)))).squeeze(-1)


def main() -> None:
    args = options(__doc__, ("cuda_graph",)).parse_args()
    batch, feat, dim, depth = (1024, 64, 384, 24) if CUDA else (16, 8, 16, 3)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ResMLP(feat, dim, depth)
        xs = torch.randn(8, batch, feat)
        ys = xs[..., :4].sum(-1).sin() + 0.1 * torch.randn(8, batch)
    params = list(model.parameters())
    graph = args.variant == "cuda_graph" and CUDA
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True, capturable=True) if graph else adamw(params)
    static_x, static_y = xs[0].clone(), ys[0].clone()

    def step() -> torch.Tensor:
        loss = F.mse_loss(model(static_x), static_y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    g = None
    if graph:
        saved = [p.detach().clone() for p in params]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():  # undo the warm-up: the baseline's weights and a fresh optimizer state
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)
            for st in opt.state.values():
                for v in st.values():
                    if torch.is_tensor(v):
                        v.zero_()
        opt.zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step()
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        static_x.copy_(xs[i % 8])
        static_y.copy_(ys[i % 8])
        if g is not None:
            g.replay()
            total += static_loss
        else:
            total += step()
        timer.end()
    timer.report(f"graph_train_step variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
