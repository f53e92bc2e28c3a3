"""Full-batch GCN training whose fairly dense normalised adjacency is kept as a sparse COO tensor.

Workload: semi-supervised node classification with a Kipf & Welling GCN (3 layers 512 -> 256 -> 256
-> 64 classes, ReLU, float32, fused AdamW, cross-entropy on 10 % labelled nodes) over one graph of
8,192 nodes in 16 communities (a stochastic block model: 60 % of the pairs inside a community and
6 % across are linked, ~9 % of all pairs: 6.3M directed edges plus self-loops). The symmetric
normalised adjacency D^-1/2 (A + I) D^-1/2 is stored as a coalesced `torch.sparse_coo_tensor`, the
way Kipf's reference `pygcn` (`sparse_mx_to_torch_sparse_tensor`, `torch.spmm(adj, support)`) and
most GCN tutorials store it, and every layer propagates with `torch.sparse.mm(adj, support)`: a
cuSPARSE SpMM (COO converted to CSR on the way) that gathers a 256-float row per nonzero, and in the
backward `adj.t() @ grad`, a transposed COO that is coalesced (sorted) again for every layer. At
~9 % density the "sparse" matrix holds 6.3M of 67M entries: the sparse layout reads less data than
the dense one but runs far below what a dense GEMM does with the same work.

Variant `dense_adj`: `adj.to_dense()` once at start-up (268 MB of float32) and `adj @ support` as a
dense float32 GEMM (cuBLAS, TF32 off as by default): the same propagation, 11x the multiply-adds,
no sorting. The same losses and updates up to summation order.

No extra variant.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn

if CUDA:
    NODES, COMMUNITIES, IN, HIDDEN, CLASSES = 8192, 16, 512, 256, 64
else:
    NODES, COMMUNITIES, IN, HIDDEN, CLASSES = 256, 4, 32, 16, 8
P_IN, P_OUT, LABELLED = 0.6, 0.06, 0.1


class GCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.ModuleList([nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, CLASSES)])

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        for i, lin in enumerate(self.weights):
            support = x @ lin.weight.T
            x = (torch.sparse.mm(adj, support) if adj.is_sparse else adj @ support) + lin.bias
            if i < len(self.weights) - 1:
                x = F.relu(x)
        return x


def normalised_adjacency(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A stochastic-block-model graph: D^-1/2 (A + I) D^-1/2 as a coalesced COO tensor, and the communities."""
    community = torch.arange(NODES, device=DEVICE) * COMMUNITIES // NODES
    same = community[:, None] == community[None, :]
    link = torch.rand(NODES, NODES, device=DEVICE, generator=gen) < torch.where(same, P_IN, P_OUT)
    link = torch.triu(link, 1)
    a = (link | link.T).float() + torch.eye(NODES, device=DEVICE)
    d = a.sum(1).rsqrt()
    return (d[:, None] * a * d[None]).to_sparse().coalesce(), community


def main() -> None:
    args = options(__doc__, ("dense_adj",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = GCN()
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    adj, community = normalised_adjacency(gen)
    if args.variant == "dense_adj":
        adj = adj.to_dense()
    centers = torch.randn(COMMUNITIES, IN, device=DEVICE, generator=gen)
    x = centers[community] + 2.0 * torch.randn(NODES, IN, device=DEVICE, generator=gen)
    labels = (community * (CLASSES // COMMUNITIES)
              + torch.randint(0, CLASSES // COMMUNITIES, (NODES,), device=DEVICE, generator=gen))
    train_idx = torch.randperm(NODES, device=DEVICE, generator=gen)[: int(LABELLED * NODES)]

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    correct = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        logits = model(x, adj)
        loss = F.cross_entropy(logits[train_idx], labels[train_idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        correct += (logits.detach().argmax(-1) == labels).sum()
        timer.end()
    timer.report(f"gcn_sparse_dense_graph variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"node accuracy {correct.item() / (args.steps * NODES):.5f}")


if __name__ == "__main__":
    main()
