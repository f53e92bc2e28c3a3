"""Knowledge-graph embedding training whose filtered negative sampling is a Python loop on the training thread.

Workload: RotatE link prediction on an FB15k-237-sized graph (14,541 entities, 237 relations,
272,115 synthetic training triples drawn on the GPU, duplicates removed): entities as 500-dimensional
complex vectors, relations as 500 phases, score `gamma - |h * r - t|` (gamma 9), 1,024 positive
triples per step, 64 corrupted tails each, self-adversarial negative-sampling loss (temperature 1),
`Adam(lr=5e-5)` (fused).
Negatives are filtered: a corrupted tail that is a known tail of (h, r) is replaced. The candidates
(two per slot) are drawn on the GPU, then the batch and the candidates are read with `.tolist()`, and
a Python loop over the 65,536 slots looks each candidate up in a `dict[(h, r)] -> set` of known tails
built at start-up, keeps the first candidate that is not a known tail (else the second), and the
chosen tails go back with `torch.tensor(..., device=...)`.

Variant `gpu_filter`: the same rule on the GPU: the known (h, r, t) triples as sorted int64 keys,
`torch.searchsorted` of the candidates' keys, `torch.where` between the two candidates; the same
negatives and losses, no host round trip.

Variant `compiled` (extra, timed but not recorded): the baseline with the RotatE model under
`torch.compile` (default mode); the sampler is unchanged.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    ENTITIES, RELATIONS, TRIPLES, DIM, BATCH, NEGATIVES = 14541, 237, 272115, 500, 1024, 64
else:
    ENTITIES, RELATIONS, TRIPLES, DIM, BATCH, NEGATIVES = 500, 11, 4000, 16, 32, 8
GAMMA, EPSILON, ADV_TEMPERATURE = 9.0, 2.0, 1.0


class RotatE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.range = (GAMMA + EPSILON) / DIM
        self.entity = nn.Parameter(torch.empty(ENTITIES, 2 * DIM).uniform_(-self.range, self.range))
        self.relation = nn.Parameter(torch.empty(RELATIONS, DIM).uniform_(-self.range, self.range))

    def forward(self, pos: torch.Tensor, neg_tails: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pos (B, 3) triples, neg_tails (B, K) -> positive scores (B,), negative scores (B, K)."""
        h_re, h_im = self.entity[pos[:, 0]].chunk(2, -1)
        phase = self.relation[pos[:, 1]] / (self.range / math.pi)
        r_re, r_im = torch.cos(phase), torch.sin(phase)
        hr_re, hr_im = h_re * r_re - h_im * r_im, h_re * r_im + h_im * r_re
        tails = torch.cat([pos[:, 2:], neg_tails], 1)
        t_re, t_im = self.entity[tails].chunk(2, -1)
        d_re, d_im = hr_re[:, None] - t_re, hr_im[:, None] - t_im
        score = GAMMA - torch.sqrt(d_re * d_re + d_im * d_im).sum(-1)
        return score[:, 0], score[:, 1:]


def loss_of(pos_score: torch.Tensor, neg_score: torch.Tensor) -> torch.Tensor:
    weights = F.softmax(neg_score * ADV_TEMPERATURE, dim=1).detach()
    neg = (weights * F.logsigmoid(-neg_score)).sum(1)
    return -(F.logsigmoid(pos_score).mean() + neg.mean()) / 2


def make_graph(gen: torch.Generator) -> torch.Tensor:
    """Training triples: skewed relation frequencies, heads and tails uniform, duplicates removed."""
    rel_weights = torch.arange(1, RELATIONS + 1, device=DEVICE, dtype=torch.float32) ** -1.0
    r = torch.multinomial(rel_weights, TRIPLES, replacement=True, generator=gen)
    h = torch.randint(0, ENTITIES, (TRIPLES,), device=DEVICE, generator=gen)
    t = torch.randint(0, ENTITIES, (TRIPLES,), device=DEVICE, generator=gen)
    return torch.unique(torch.stack([h, r, t], 1), dim=0)


def corrupt_tails_python(pos: list[list[int]], cands: list[list[list[int]]],
                         known_tails: dict[tuple[int, int], set[int]]) -> list[list[int]]:
    """For each slot the first candidate that is not a known tail of (h, r), else the second."""
    negatives = []
    for (h, r, _), slots in zip(pos, cands, strict=True):
        known = known_tails[(h, r)]
        negatives.append([c0 if c0 not in known else c1 for c0, c1 in slots])
    return negatives


def corrupt_tails_gpu(pos: torch.Tensor, cands: torch.Tensor, sorted_keys: torch.Tensor) -> torch.Tensor:
    """The same rule with the known triples as sorted keys (h * R + r) * E + t."""
    keys = ((pos[:, 0] * RELATIONS + pos[:, 1]) * ENTITIES)[:, None] + cands[..., 0]
    at = torch.searchsorted(sorted_keys, keys).clamp_(max=sorted_keys.numel() - 1)
    return torch.where(sorted_keys[at] == keys, cands[..., 1], cands[..., 0])


def main() -> None:
    args = options(__doc__, ("gpu_filter", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = RotatE()
    net = torch.compile(model) if args.variant == "compiled" else model
    opt = torch.optim.Adam(model.parameters(), lr=5e-5, **({"fused": True} if CUDA else {}))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    triples = make_graph(gen)
    known_tails: dict[tuple[int, int], set[int]] = {}
    sorted_keys = torch.empty(0, dtype=torch.long, device=DEVICE)
    if args.variant == "gpu_filter":
        sorted_keys = torch.sort((triples[:, 0] * RELATIONS + triples[:, 1]) * ENTITIES + triples[:, 2]).values
    else:
        for h, r, t in triples.tolist():
            known_tails.setdefault((h, r), set()).add(t)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    neg_sum = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        pos = triples[torch.randint(0, triples.shape[0], (BATCH,), device=DEVICE, generator=gen)]
        cands = torch.randint(0, ENTITIES, (BATCH, NEGATIVES, 2), device=DEVICE, generator=gen)
        if args.variant == "gpu_filter":
            neg_tails = corrupt_tails_gpu(pos, cands, sorted_keys)
        else:
            neg_tails = torch.tensor(corrupt_tails_python(pos.tolist(), cands.tolist(), known_tails), device=DEVICE)
        pos_score, neg_score = net(pos, neg_tails)
        loss = loss_of(pos_score, neg_score)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        neg_sum += neg_tails.sum()
        timer.end()
    timer.report(f"kge_python_negatives variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"negatives checksum {neg_sum.item()}")


if __name__ == "__main__":
    main()
