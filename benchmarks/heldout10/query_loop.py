"""Dense-retrieval evaluation that scores each query against the corpus on its own: one matrix-vector product and one top-k per query.

The usual suspect: batching. A corpus of 524,288 passage embeddings (256 dims, L2-normalised, bf16,
256 MB) on the GPU; per step 128 queries (768-dim features) go through a query encoder (Linear
768 -> 1024, GELU, Linear 1024 -> 256, L2 norm; bf16, inference mode) and are scored by inner
product for their top 100 passages. Baseline: `for q in queries: torch.topk(corpus @ q, 100)`, so
the 256 MB corpus is streamed once per query (128 times per step) by a matrix-vector product, and
128 top-k selections run over 524,288 scores each. Variant `batched`: `torch.topk(queries @
corpus.T, 100, dim=1)`: one GEMM reads the corpus once and one top-k handles all rows (the same
scores up to the GEMM's summation order, bf16 rounding).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("batched",)
if CUDA:
    CORPUS, DIM, FEAT, QUERIES, TOPK = 524288, 256, 768, 128, 100
else:
    CORPUS, DIM, FEAT, QUERIES, TOPK = 4096, 32, 48, 8, 10
DTYPE = torch.bfloat16 if CUDA else torch.float32


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(FEAT, 1024), nn.GELU(), nn.Linear(1024, DIM)).to(DEVICE, DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    corpus = F.normalize(torch.randn(CORPUS, DIM, device=DEVICE, generator=gen), dim=1).to(DTYPE)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    hits = torch.zeros((), device=DEVICE, dtype=torch.int64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            feats = torch.randn(QUERIES, FEAT, device=DEVICE, generator=gen, dtype=DTYPE)
            q = F.normalize(encoder(feats).float(), dim=1).to(DTYPE)
            if args.variant == "batched":
                vals, ids = torch.topk(q @ corpus.t(), TOPK, dim=1)
            else:
                found = [torch.topk(corpus @ q[j], TOPK) for j in range(QUERIES)]
                vals = torch.stack([f.values for f in found])
                ids = torch.stack([f.indices for f in found])
            total += vals.double().sum()
            hits += (ids[:, 0] < CORPUS // 2).sum()
            timer.end()
    timer.report(f"query_loop variant={args.variant or 'baseline'} top-{TOPK} score checksum "
                 f"{total.item() / args.steps:.3f}, top-1 in first half {int(hits)}")


if __name__ == "__main__":
    main()
