"""Full-graph GraphSAGE training whose mean aggregation materialises one message row per edge (gather, then `index_add_`).

Memory traffic. Node classification on one synthetic graph of 131,072 nodes, each with 32 random
in-neighbours (4,194,304 edges, destination-sorted), 128 input features, 3 SAGE layers of width 128
(`relu(W_self h_i + W_neigh mean_j h_j)`), a Linear to 47 classes, cross-entropy on every node,
float32, fused AdamW. The aggregation is written message-passing style (as PyG's `propagate` does):
`msg = h.index_select(0, src)` writes a (4.19M, 128) float32 message tensor (2.1 GB),
`zeros(N, 128).index_add_(0, dst, msg)` reads it back with atomics, then divides by the degree; the
backward gathers a gradient row per edge (another 2.1 GB) and scatter-adds it into the sources.

Variant `fused_gather`: the same mean aggregation as one fused gather-reduce,
`F.embedding_bag(src, h, offsets, mode="mean")` over the destination-sorted edge list (the CSR
offsets): no per-edge tensor in forward or backward.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

VARIANTS = ("fused_gather",)
NODES, DEG, FEAT, CLASSES = (131072, 32, 128, 47) if CUDA else (2048, 8, 16, 5)
LAYERS = 3


class SAGE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_lin = nn.ModuleList(nn.Linear(FEAT, FEAT) for _ in range(LAYERS))
        self.neigh_lin = nn.ModuleList(nn.Linear(FEAT, FEAT, bias=False) for _ in range(LAYERS))
        self.out = nn.Linear(FEAT, CLASSES)

    def forward(self, x: torch.Tensor, aggregate: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        h = x
        for lin_s, lin_n in zip(self.self_lin, self.neigh_lin, strict=True):
            h = F.relu(lin_s(h) + lin_n(aggregate(h)))
        return self.out(h)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = SAGE().to(DEVICE)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    src = torch.randint(0, NODES, (NODES * DEG,), device=DEVICE, generator=gen)
    dst = torch.arange(NODES, device=DEVICE).repeat_interleave(DEG)
    offsets = torch.arange(0, NODES * DEG, DEG, device=DEVICE)
    deg = torch.bincount(dst, minlength=NODES).clamp(min=1).float().unsqueeze(1)
    x = torch.randn(NODES, FEAT, device=DEVICE, generator=gen)
    y = torch.randint(0, CLASSES, (NODES,), device=DEVICE, generator=gen)

    def scatter_mean(h: torch.Tensor) -> torch.Tensor:
        msg = h.index_select(0, src)
        return torch.zeros_like(h).index_add_(0, dst, msg) / deg

    def bag_mean(h: torch.Tensor) -> torch.Tensor:
        return F.embedding_bag(src, h, offsets, mode="mean")

    aggregate = bag_mean if args.variant == "fused_gather" else scatter_mean

    def loss_of(i: int) -> torch.Tensor:
        return F.cross_entropy(model(x, aggregate), y)

    train("edge_messages", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
