"""Group-linear (block-diagonal) feed-forward layers written as dense GEMMs over a masked full weight.

The usual suspect: GEMM shapes. A DeLighT/xLSTM-style token model: 16,000-token embedding (width
2048), 4 pre-norm blocks of a dense 2048 x 2048 mixing Linear and a grouped feed-forward (8 groups:
2048 -> 8192 as 8 blocks of 256 -> 1024, GELU, 8192 -> 2048 as 8 blocks of 1024 -> 256), LayerNorm,
mean pool, 1,000 classes; 8 x 1,024 tokens, bf16 autocast, fused AdamW. Baseline: each grouped
layer is `F.linear(x, w * mask, b)` with a dense (out, in) float32 weight and a block-diagonal 0/1
mask, so every GEMM is 8 times the useful FLOPs (forward, input and weight gradients), the masked
weight is rebuilt each step and AdamW runs over the dense weights. Variant `grouped_bmm`: the same
blocks as a (groups, out, in) weight, `einsum('ngi,goi->ngo')` (a batched GEMM over the 8 groups);
the same values (the off-block zeros never contribute, their gradients are zero and AdamW is
elementwise).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

VARIANTS = ("grouped_bmm",)
if CUDA:
    WIDTH, GROUPS, EXPAND, BLOCKS, VOCAB, CLASSES, BATCH, SEQ = 2048, 8, 4, 4, 16000, 1000, 8, 1024
else:
    WIDTH, GROUPS, EXPAND, BLOCKS, VOCAB, CLASSES, BATCH, SEQ = 64, 4, 4, 2, 256, 10, 2, 16


class GroupLinear(nn.Module):
    """`groups` independent (in/groups -> out/groups) projections, dense-masked or batched."""

    def __init__(self, d_in: int, d_out: int, gen: torch.Generator, grouped: bool) -> None:
        super().__init__()
        gi, go = d_in // GROUPS, d_out // GROUPS
        blocks = torch.randn(GROUPS, go, gi, device=DEVICE, generator=gen) / math.sqrt(gi)
        self.grouped = grouped
        self.bias = nn.Parameter(torch.zeros(d_out, device=DEVICE))
        if grouped:
            self.weight = nn.Parameter(blocks)
        else:
            self.weight = nn.Parameter(torch.block_diag(*blocks))
            self.register_buffer("mask", torch.block_diag(*torch.ones_like(blocks)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.grouped:
            return F.linear(x, self.weight * self.mask, self.bias)
        *lead, d_in = x.shape
        y = torch.einsum("ngi,goi->ngo", x.reshape(-1, GROUPS, d_in // GROUPS), self.weight)
        return y.reshape(*lead, -1) + self.bias


class Block(nn.Module):
    def __init__(self, gen: torch.Generator, grouped: bool) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.up = GroupLinear(WIDTH, EXPAND * WIDTH, gen, grouped)
        self.down = GroupLinear(EXPAND * WIDTH, WIDTH, gen, grouped)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.n1(x))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    grouped = args.variant == "grouped_bmm"
    emb = nn.Embedding(VOCAB, WIDTH).to(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    blocks = nn.ModuleList(Block(gen, grouped) for _ in range(BLOCKS)).to(DEVICE)
    norm, head = nn.LayerNorm(WIDTH).to(DEVICE), nn.Linear(WIDTH, CLASSES).to(DEVICE)
    params = [*emb.parameters(), *blocks.parameters(), *norm.parameters(), *head.parameters()]
    opt = adamw(params)
    data = torch.Generator(device=DEVICE).manual_seed(2)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE, generator=data)
        labels = torch.randint(0, CLASSES, (BATCH,), device=DEVICE, generator=data)
        with bf16():
            x = emb(ids)
            for blk in blocks:
                x = blk(x)
            loss = F.cross_entropy(head(norm(x).mean(1)).float(), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        del loss, x
        timer.end()
    timer.report(f"masked_group_linear variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
