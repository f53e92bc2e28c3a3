"""An MLP over token embeddings whose batches are tokenized in plain Python on the training thread:
the GPU waits while the CPU splits and hashes ~4000 strings each step.

Run: tracekit profile sample_traces/scripts/train_tokenize.py            (tokenized on the main thread)
     tracekit profile sample_traces/scripts/train_tokenize.py --fixed    (4 DataLoader workers tokenize ahead)
Steps are marked by tracekit's optimizer.step() hook. No host sync is needed for the stall: the CPU
queues a step's kernels, then tokenizes the next batch for longer than the GPU takes to run them.
At the end it prints the mean step time measured without help from the profiler.
"""

import argparse
import random
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

WORDS = [w * k for w in ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta") for k in (1, 2)]


def _pool(size: int = 8192) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(size)]


POOL = _pool()  # short strings of 4 to 12 words (made once: the per-step work is the tokenizer's)


def texts(step: int, n: int) -> list[str]:
    """The `n` strings of batch `step`: a window of the pool."""
    return [POOL[(step * n + j) % len(POOL)] for j in range(n)]


def tokenize(batch: list[str], vocab: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A whitespace + character-hash tokenizer in plain Python: ids (len(batch), seq), padded with 0,
    and labels (the string's word count mod 10)."""
    ids, labels = [], []
    for s in batch:
        row = []
        for word in s.split():
            h = 7
            for c in word:
                h = (h * 31 + ord(c)) % (vocab - 1)
            row.append(h + 1)
        labels.append(len(row) % 10)
        ids.append((row + [0] * seq)[:seq])
    return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


class Batches(IterableDataset):
    """Tokenized batches, made in the DataLoader's workers (each worker takes every k-th step)."""

    def __init__(self, steps: int, n: int, vocab: int, seq: int) -> None:
        self.steps, self.n, self.vocab, self.seq = steps, n, vocab, seq

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        first, every = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(first, self.steps, every):
            yield tokenize(texts(i, self.n), self.vocab, self.seq)


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        blocks: list[nn.Module] = [nn.Linear(dim, hidden), nn.GELU()]
        for _ in range(layers - 2):
            blocks += [nn.Linear(hidden, hidden), nn.GELU()]
        blocks += [nn.Linear(hidden, 10)]
        self.mlp = nn.Sequential(*blocks)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids > 0).unsqueeze(-1).float()
        pooled = (self.embed(ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.mlp(pooled)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="tokenize in 4 DataLoader workers")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--strings", type=int, default=None, help="strings per batch (default 4000 on CUDA, 200 on CPU)")
    p.add_argument("--hidden", type=int, default=None, help="MLP width (default 4096 on CUDA)")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    vocab, seq, dim, hidden, layers, n = (32768, 16, 512, 4096, 6, 4000) if cuda else (512, 16, 16, 32, 2, 200)
    n = args.strings or n
    hidden = args.hidden or hidden
    torch.manual_seed(0)
    model = Model(vocab, dim, hidden, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if args.fixed:
        loader = DataLoader(Batches(args.steps, n, vocab, seq), batch_size=None, num_workers=4,
                            pin_memory=cuda, persistent_workers=False, prefetch_factor=2)
        batches: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(loader)
    else:
        batches = (tokenize(texts(i, n), vocab, seq) for i in range(args.steps))  # on this thread
    running = torch.zeros((), device=device)
    times = []
    for ids, labels in batches:
        t0 = time.perf_counter()
        ids, labels = ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        loss = F.cross_entropy(model(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running += loss.detach()  # no per-step .item(): the stall is the tokenizer's alone
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[4:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"mean loss {running.item() / len(times):.4f}; mean step time over steps 4..{len(times) - 1}: "
          f"{per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
