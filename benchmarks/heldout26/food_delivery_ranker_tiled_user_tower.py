"""Food-delivery restaurant ranking whose serving batch repeats each user's history for every candidate row.

Online ranking for a food-delivery app: each request is one user and 512 candidate restaurants;
96 requests per step (49,152 user-restaurant rows). The model (bf16, inference mode): a user tower
that encodes the user's last 64 orders (restaurant-id embeddings from a 200,000-row table,
positions, a 2-layer pre-norm transformer of width 256, mean pooling) with 32 profile features;
a restaurant tower (id embedding, 16 context features: distance, ETA, rating, price level, ...);
a scoring MLP on `[u, r, u * r]` giving the order probability. The user tower does not depend on
the candidate.

Baseline: the serving code reuses the training pipeline's impression rows: every row carries its
user's features, `histories.repeat_interleave(512, 0)`, so the user tower runs on 49,152 history
sequences, 512 copies of each of the 96: 3.1 M history tokens through the transformer (~10 TFLOP)
per step for 6,144 distinct ones.

Variant `user_tower_once`: the user tower runs once per request (96 rows) and its output is
repeated for the request's 512 candidates, `u.repeat_interleave(512, 0)`; the restaurant tower and
scoring MLP run on the 49,152 rows as before. The same features, weights and scores (the user tower
runs on 96 instead of 49,152 rows: other GEMM shapes, last bf16 bits).
"""

import torch
from _common import CUDA, DEVICE, StepTimer, encoder, options
from torch import nn

VARIANTS = ("user_tower_once",)
if CUDA:
    REQUESTS, CANDIDATES, HISTORY, DIM, HEADS, LAYERS = 96, 512, 64, 256, 4, 2
else:  # a tiny CPU check of the script
    REQUESTS, CANDIDATES, HISTORY, DIM, HEADS, LAYERS = 2, 8, 8, 32, 2, 1
RESTAURANTS, PROFILE, CONTEXT, POOL = 200_000, 32, 16, 4
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Ranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rest = nn.Embedding(RESTAURANTS, DIM)
        self.pos = nn.Parameter(torch.randn(HISTORY, DIM) * 0.02)
        self.history, _, _ = encoder(DIM, HEADS, LAYERS, DIM)
        self.profile = nn.Linear(PROFILE, DIM)
        self.user = nn.Sequential(nn.Linear(2 * DIM, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
        self.cand = nn.Sequential(nn.Linear(DIM + CONTEXT, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
        self.score = nn.Sequential(nn.Linear(3 * DIM, 512), nn.ReLU(), nn.Linear(512, 128), nn.ReLU(),
                                   nn.Linear(128, 1))

    def user_tower(self, history: torch.Tensor, profile: torch.Tensor) -> torch.Tensor:
        h = self.history(self.rest(history) + self.pos).mean(1)
        return self.user(torch.cat([h, self.profile(profile)], -1))

    def forward(self, u: torch.Tensor, rest: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        r = self.cand(torch.cat([self.rest(rest), context], -1))
        return torch.sigmoid(self.score(torch.cat([u, r, u * r], -1))).squeeze(-1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Ranker().to(DTYPE).eval()
    gen = torch.Generator(DEVICE).manual_seed(1)
    popularity = 1.0 / torch.arange(1, RESTAURANTS + 1, device=DEVICE, dtype=torch.float32) ** 0.7
    histories = torch.multinomial(popularity, POOL * REQUESTS * HISTORY, replacement=True, generator=gen)
    histories = histories.view(POOL, REQUESTS, HISTORY)
    profiles = torch.randn(POOL, REQUESTS, PROFILE, generator=gen, device=DEVICE).to(DTYPE)
    cands = torch.randint(0, RESTAURANTS, (POOL, REQUESTS * CANDIDATES), generator=gen, device=DEVICE)
    context = torch.randn(POOL, REQUESTS * CANDIDATES, CONTEXT, generator=gen, device=DEVICE).to(DTYPE)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        b = i % POOL
        with torch.inference_mode():
            if args.variant == "user_tower_once":
                u = model.user_tower(histories[b], profiles[b]).repeat_interleave(CANDIDATES, 0)
            else:  # impression rows: each user's features repeated for every candidate
                u = model.user_tower(histories[b].repeat_interleave(CANDIDATES, 0),
                                     profiles[b].repeat_interleave(CANDIDATES, 0))
            p = model(u, cands[b], context[b])
            total += p.double().sum()
        timer.end()
    mean_p = total.item() / (args.steps * REQUESTS * CANDIDATES)
    timer.report(f"food_delivery_ranker_tiled_user_tower variant={args.variant or 'baseline'} "
                 f"mean order probability {mean_p:.5f}")


if __name__ == "__main__":
    main()
