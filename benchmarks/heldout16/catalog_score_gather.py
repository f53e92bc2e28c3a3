"""Sequential-recommender evaluation that scores the whole catalogue to read 101 candidates per user.

Workload: evaluating a SASRec-style next-item model with the sampled-metrics protocol of the SASRec
and BERT4Rec papers (rank the held-out item among 100 sampled negatives, HR@10 and NDCG@10): a
catalogue of 1,048,576 items whose 256-d embedding table (bf16, 512 MB) is both the input embedding
and the output layer, learned positions for 50-item histories, 2 causal pre-norm self-attention
blocks of width 256 (4 heads, ReLU feed-forward 1,024), inference mode; 4,096 users per step. The
user state is the last position's hidden vector, and the candidates are scored the way many
BERT4Rec / SASRec re-implementations write it: `scores = h @ item_emb.T` over the whole catalogue
(a 4,096 x 1,048,576 x 256 GEMM: 2.2 TFLOP and an 8.6 GB bf16 output), then
`scores.gather(1, candidates)` keeps 101 of the 1,048,576 columns of each row.

Variant `candidate_gather`: gather the 101 candidate embeddings of each user (`item_emb[candidates]`,
4,096 x 101 x 256) and take their dot products with the user state as one batched product
(`torch.bmm`): 0.2 GFLOP and 0.2 GB instead of 2.2 TFLOP and 8.6 GB, the same scores (up to the
GEMM kernels' rounding), ranks and metrics.

Variant `compiled` (extra, timed but not recorded): the baseline's scoring function (encoder, full
catalogue product, gather, metrics) under `torch.compile` (default mode).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    ITEMS, DIM, HEADS, BLOCKS, HIST, USERS, NEGATIVES, POOL = 1 << 20, 256, 4, 2, 50, 4096, 100, 16384
else:
    ITEMS, DIM, HEADS, BLOCKS, HIST, USERS, NEGATIVES, POOL = 4096, 32, 2, 2, 12, 16, 20, 64
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM, eps=1e-8), nn.LayerNorm(DIM, eps=1e-8)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ff1, self.ff2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.relu(self.ff1(self.n2(x))))


class SASRec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(ITEMS, DIM)
        self.pos_emb = nn.Embedding(HIST, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(DIM, eps=1e-8)

    def user_state(self, history: torch.Tensor) -> torch.Tensor:
        """history (U, HIST) item ids, oldest first -> the last position's hidden vector (U, DIM)."""
        x = self.item_emb(history) * math.sqrt(DIM) + self.pos_emb.weight
        for block in self.blocks:
            x = block(x)
        return self.norm(x[:, -1])


def metrics(cand_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cand_scores (U, 1 + NEGATIVES), the held-out item first -> HR@10 and NDCG@10 sums."""
    rank = (cand_scores[:, 1:] > cand_scores[:, :1]).sum(1)
    hit = rank < 10
    return hit.sum(), (hit.float() / torch.log2(rank.float() + 2.0)).sum()


def main() -> None:
    args = options(__doc__, ("candidate_gather", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SASRec()
    nn.init.normal_(model.item_emb.weight, std=1.0 / math.sqrt(DIM))
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    histories = torch.randint(1, ITEMS, (POOL, HIST), device=DEVICE, generator=gen)
    candidates = torch.randint(1, ITEMS, (POOL, 1 + NEGATIVES), device=DEVICE, generator=gen)  # held-out item first

    def score_full(history: torch.Tensor, cands: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = model.user_state(history)
        scores = h @ model.item_emb.weight.T  # every item of the catalogue
        return metrics(scores.gather(1, cands).float())

    def score_candidates(history: torch.Tensor, cands: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = model.user_state(history)
        cand_emb = model.item_emb(cands)  # (U, 1 + NEGATIVES, DIM)
        return metrics(torch.bmm(cand_emb, h[:, :, None])[..., 0].float())

    score = score_candidates if args.variant == "candidate_gather" else score_full
    if args.variant == "compiled":
        score = torch.compile(score_full)

    hits = torch.zeros((), device=DEVICE, dtype=torch.long)
    ndcg = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            first = (step * USERS) % POOL
            h, n = score(histories[first:first + USERS], candidates[first:first + USERS])
            hits += h
            ndcg += n.double()
            timer.end()
    users = args.steps * USERS
    timer.report(f"catalog_score_gather variant={args.variant or 'baseline'} HR@10 {hits.item() / users:.5f} "
                 f"NDCG@10 {ndcg.item() / users:.5f}")


if __name__ == "__main__":
    main()
