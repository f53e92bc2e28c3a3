"""Full-graph GCN scoring whose adjacency is an uncoalesced COO tensor, coalesced again by every `torch.sparse.mm`.

Nightly product-category scoring on an Amazon co-purchase graph (ogbn-products-style, 47 categories):
524,288 products, 4.2 M co-purchase pairs stored in both directions plus self loops (~8.9 M stored
entries), the symmetric-normalised adjacency D^-1/2 (A + I) D^-1/2 built once from the edge list; a
3-layer GCN (Kipf & Welling: 128 -> 128 -> 128 -> 47, ReLU, float32) runs over the whole graph with
`torch.sparse.mm(adj, h @ w)` per layer, inference. Each step scores one day's node features.

Baseline: the adjacency is `torch.sparse_coo_tensor(edge_index, values, (N, N))`, as built from
the edge list: a COO tensor not marked coalesced. The CUDA sparse-dense product needs sorted,
duplicate-free indices to build the row pointers cuSPARSE works on, so each of the 3 products per
step coalesces the 8.9 M entries again (a 64-bit-key sort, a segmented sum, index gathers), then
converts the rows to CSR offsets and the columns to int32 before the SpMM.

Variant `csr_adjacency`: the adjacency is converted once at load, `.to_sparse_csr()` (which
coalesces once): the products run cuSPARSE's CSR SpMM directly. The same matrix and products.
"""

import warnings

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options

NAME = "copurchase_gcn_uncoalesced_coo"
VARIANTS = ("csr_adjacency",)

if CUDA:
    NODES, PAIRS, FEATS, HIDDEN = 524288, 4_194_304, 128, 128
else:  # tiny check of the script on the CPU
    NODES, PAIRS, FEATS, HIDDEN = 64, 200, 16, 16
CLASSES, POOL = 47, 2


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    weights = [torch.randn(a, b, device=DEVICE) * a ** -0.5
               for a, b in ((FEATS, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES))]

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    src = torch.randint(0, NODES, (PAIRS,), generator=gen, device=DEVICE)
    dst = (src + torch.randint(1, NODES, (PAIRS,), generator=gen, device=DEVICE)) % NODES  # no self pairs
    loops = torch.arange(NODES, device=DEVICE)
    rows = torch.cat([src, dst, loops])
    cols = torch.cat([dst, src, loops])
    deg = torch.bincount(rows, minlength=NODES).float()
    vals = deg[rows].rsqrt() * deg[cols].rsqrt()
    adj = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (NODES, NODES), check_invariants=False)
    if args.variant == "csr_adjacency":
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        adj = adj.to_sparse_csr()
    del rows, cols, vals, src, dst
    features = torch.randn(POOL, NODES, FEATS, generator=gen, device=DEVICE)

    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            h = features[i % POOL]
            for j, w in enumerate(weights):
                h = torch.sparse.mm(adj, h @ w)
                if j < len(weights) - 1:
                    h = F.relu(h)
            total += h.softmax(-1)[:, 0].double().sum()
            timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} first-class probability sum {total.item():.6f}")


if __name__ == "__main__":
    main()
