"""Training of a token-classification (NER) encoder on BIO tags, logging entity-level F1 as it goes:
every step the predictions and gold tags are pulled to the host with `.tolist()` and their entity
spans are extracted in Python (strict IOB2, as seqeval's strict mode does) to count the true
positives, predicted and gold entities.

Baseline: that per-step `.tolist()` (a device sync) and the pure-Python span extraction on the
training thread, while the GPU waits. Variant `device_counts`: the same three counts computed on the
GPU with tensor ops (span ends by a reversed cumulative minimum) and accumulated in a device tensor,
read once after the last step. Same counts, same losses."""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, AttnBlock, StepTimer, adamw, bf16, options

# tags: 0 = O, 2k-1 = B-k, 2k = I-k for k = 1..4 (PER, ORG, LOC, MISC)
B, T, DIM, HEADS, LAYERS = (64, 256, 512, 8, 6) if CUDA else (4, 32, 32, 4, 1)
VOCAB, TAGS, BATCHES = 30000, 9, 6


def gold_tags(rng: np.random.Generator) -> np.ndarray:
    """Valid IOB2 sequences: entities of 1-5 tokens, about one token in three inside an entity."""
    out = np.zeros((B, T), dtype=np.int64)
    for r in range(B):
        t = 0
        while t < T:
            if rng.random() < 0.12:
                k, n = int(rng.integers(1, 5)), int(rng.integers(1, 6))
                out[r, t] = 2 * k - 1
                out[r, t + 1:t + n] = 2 * k
                t += n + 1
            else:
                t += 1
    return out


def spans(rows: list[list[int]]) -> set[tuple[int, int, int, int]]:
    """Strict IOB2 entities (row, start, end, type): a B-k and the I-k tokens right after it."""
    found = set()
    for r, tags in enumerate(rows):
        n, t = len(tags), 0
        while t < n:
            tag = tags[t]
            if tag % 2 == 1:
                end = t
                while end + 1 < n and tags[end + 1] == tag + 1:
                    end += 1
                found.add((r, t, end, (tag + 1) // 2))
                t = end + 1
            else:
                t += 1
    return found


def span_counts(pred: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """(true positives, predicted entities, gold entities) on the device, no sync."""
    pos = torch.arange(T, device=pred.device).expand_as(pred)

    def next_break(x: torch.Tensor) -> torch.Tensor:
        # a token continues the entity before it when it is I-k right after B-k or I-k
        prev = F.pad(x[:, :-1], (1, 0))
        cont = (x % 2 == 0) & (x > 0) & ((prev == x) | (prev == x - 1))
        idx = torch.where(cont, torch.full_like(pos, T), pos)
        nb = torch.flip(torch.cummin(torch.flip(idx, [1]), dim=1).values, [1])
        return F.pad(nb[:, 1:], (0, 1), value=T)  # the first break after each position

    is_b_gold, is_b_pred = gold % 2 == 1, pred % 2 == 1
    tp = (is_b_gold & (pred == gold) & (next_break(pred) == next_break(gold))).sum()
    return torch.stack([tp, is_b_pred.sum(), is_b_gold.sum()])


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(VOCAB, DIM), nn.Parameter(torch.randn(T, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
        self.norm, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, TAGS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos
        for blk in self.blocks:
            x = blk(x, F.scaled_dot_product_attention)
        return self.out(self.norm(x))


def main() -> None:
    args = options(__doc__ or "", ("device_counts",)).parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    golds = torch.from_numpy(np.stack([gold_tags(rng) for _ in range(BATCHES)])).to(DEVICE)
    with torch.device(DEVICE):
        model = Tagger()
        gen = torch.Generator(DEVICE).manual_seed(1)
        ids = torch.randint(1, VOCAB, (BATCHES, B, T), generator=gen)
        counts = torch.zeros(3, dtype=torch.int64)
    opt = adamw(list(model.parameters()))
    host = [0, 0, 0]
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        x, gold = ids[i % BATCHES], golds[i % BATCHES]
        with bf16():
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), gold.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        pred = logits.detach().argmax(-1)
        if args.variant == "device_counts":
            counts += span_counts(pred, gold)
        else:  # the everyday per-step metric: to the host, spans in Python
            p, g = spans(pred.tolist()), spans(gold.tolist())
            host[0] += len(p & g)
            host[1] += len(p)
            host[2] += len(g)
        timer.end()
    tp, n_pred, n_gold = counts.tolist() if args.variant == "device_counts" else host
    f1 = 2 * tp / max(n_pred + n_gold, 1)
    timer.report(f"ner_span_f1_per_step variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"tp {tp} pred {n_pred} gold {n_gold} f1 {f1:.4f}")


if __name__ == "__main__":
    main()
