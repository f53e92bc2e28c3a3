"""Paper-topic classification on a 4 M-node citation graph whose node features are stored feature-major, then gathered.

Neighbour-sampled GraphSAGE training (mean aggregators, 2 layers of 256, 172 subject areas, bf16
autocast, fused AdamW) on an ogbn-papers-style citation graph: 4,194,304 papers with 128 bf16
attributes each (1 GB on the GPU), a citation table of 32 references per paper; each step takes
16,384 seed papers and samples 25 references per seed and 10 per reference (GraphSAGE's fan-outs,
with replacement) on the GPU, then gathers the features of the 4.5 M sampled nodes for the two
layers.

Baseline: the attributes were loaded from a columnar store, one tensor per attribute, and stacked
as they came: `x = torch.stack(columns)`, a (128, 4 M) feature-major table; each hop's features
are `x[:, nodes].T`. Every gathered value sits in another row of the table, 8 MB from its
neighbours: the index kernel reads 2 useful bytes per 32-byte sector, ~18.5 GB of sector traffic
for 1.2 GB of features per step.

Variant `node_major_rows`: the same columns stacked node-major once at load,
`torch.stack(columns, dim=1)` (4 M x 128): each sampled node is one contiguous 256-byte row and
`x[nodes]` reads whole rows. The same sampled nodes, values, model and updates (the layers get
contiguous instead of transposed inputs: possibly other GEMM algorithms, last bf16 bits).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("node_major_rows",)
if CUDA:
    PAPERS, ATTRS, REFS, SEEDS, FANOUT = 4_194_304, 128, 32, 16_384, (25, 10)
else:  # a tiny CPU check of the script
    PAPERS, ATTRS, REFS, SEEDS, FANOUT = 4096, 16, 8, 32, (5, 3)
HIDDEN, CLASSES, POOL = 256, 172, 8
DTYPE = torch.bfloat16 if CUDA else torch.float32  # the CPU check has no autocast


class Sage(nn.Module):
    """Two GraphSAGE layers with mean aggregation (self and neighbour mean concatenated)."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(2 * ATTRS, HIDDEN)
        self.l2 = nn.Linear(2 * HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, h0: torch.Tensor, h1: torch.Tensor, h2: torch.Tensor) -> torch.Tensor:
        f1, f2 = FANOUT
        # layer 1 for the seeds (neighbours: hop 1) and for the hop-1 nodes (neighbours: hop 2)
        z0 = F.relu(self.l1(torch.cat([h0, h1.view(-1, f1, ATTRS).mean(1)], -1)))
        z1 = F.relu(self.l1(torch.cat([h1, h2.view(-1, f2, ATTRS).mean(1)], -1)))
        z = F.relu(self.l2(torch.cat([z0, z1.view(-1, f1, HIDDEN).mean(1)], -1)))
        return self.head(z)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Sage()
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # the attribute columns as the columnar loader returns them: one (PAPERS,) tensor per attribute
    columns = [torch.randn(PAPERS, generator=gen, device=DEVICE).to(DTYPE) for _ in range(ATTRS)]
    if args.variant == "node_major_rows":
        x = torch.stack(columns, dim=1)  # (PAPERS, ATTRS): one row per paper

        def gather(nodes: torch.Tensor) -> torch.Tensor:
            return x[nodes]
    else:
        x = torch.stack(columns)  # (ATTRS, PAPERS), as loaded

        def gather(nodes: torch.Tensor) -> torch.Tensor:
            return x[:, nodes].T
    del columns
    refs = torch.randint(0, PAPERS, (PAPERS, REFS), generator=gen, device=DEVICE, dtype=torch.int32)
    labels = torch.randint(0, CLASSES, (PAPERS,), generator=gen, device=DEVICE)
    seed_pool = torch.randint(0, PAPERS, (POOL, SEEDS), generator=gen, device=DEVICE)
    sampler = torch.Generator(DEVICE).manual_seed(2)

    def loss_of(i: int) -> torch.Tensor:
        seeds = seed_pool[i % POOL]
        f1, f2 = FANOUT
        hop1 = refs[seeds[:, None], torch.randint(0, REFS, (SEEDS, f1), generator=sampler, device=DEVICE)]
        hop1 = hop1.flatten().long()
        hop2 = refs[hop1[:, None], torch.randint(0, REFS, (hop1.numel(), f2), generator=sampler, device=DEVICE)]
        hop2 = hop2.flatten().long()
        with bf16():
            logits = model(gather(seeds), gather(hop1), gather(hop2))
        return F.cross_entropy(logits.float(), labels[seeds])

    train("citation_sage_feature_major_gather", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
