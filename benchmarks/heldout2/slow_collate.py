"""A text classifier (embedding + 2-layer transformer encoder, mean pool) fed by a DataLoader with
num_workers=0 whose collate pads the variable-length token lists in pure Python (list arithmetic,
then torch.tensor on nested lists) on the training thread.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/slow_collate.py
Variants: --variant vector_collate (the samples are tensors; pad_sequence + a length mask, still on
the main thread), --variant workers (the Python collate in 6 DataLoader workers, pinned memory,
non_blocking copies), --variant both (vector collate in 6 workers). On the GPU: batch 256, lengths
64..512 (token ids < 30,000), width 512, 8 heads, bf16 autocast, AdamW(fused). Each step ends with
tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

VOCAB = 30000


class Corpus(Dataset):
    """Pre-tokenised documents kept as Python lists of ints (or as tensors), with a label each."""

    def __init__(self, n: int, max_len: int, as_tensor: bool) -> None:
        g = torch.Generator().manual_seed(0)
        lens = torch.randint(max_len // 8, max_len + 1, (n,), generator=g).tolist()
        self.docs = [torch.randint(1, VOCAB, (k,), generator=g) for k in lens]
        if not as_tensor:
            self.docs = [d.tolist() for d in self.docs]  # type: ignore[misc]
        self.labels = torch.randint(0, 4, (n,), generator=g).tolist()

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> tuple[object, int]:
        return self.docs[i], self.labels[i]


def python_collate(batch: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad with zeros to the longest sample, build the mask, all in Python lists."""
    longest = max(len(d) for d, _ in batch)
    ids = [d + [0] * (longest - len(d)) for d, _ in batch]
    mask = [[1] * len(d) + [0] * (longest - len(d)) for d, _ in batch]
    return torch.tensor(ids), torch.tensor(mask, dtype=torch.bool), torch.tensor([y for _, y in batch])


def vector_collate(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same batch from tensors: pad_sequence and a mask from the lengths."""
    docs = [d for d, _ in batch]
    lens = torch.tensor([len(d) for d in docs])
    ids = pad_sequence(docs, batch_first=True)
    mask = torch.arange(ids.shape[1])[None, :] < lens[:, None]
    return ids, mask, torch.tensor([y for _, y in batch])


class Classifier(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.enc(self.emb(ids), src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1))


def main() -> None:
    args = options(__doc__, ("vector_collate", "workers", "both")).parse_args()
    batch, max_len, dim, heads = (256, 512, 512, 8) if CUDA else (8, 32, 32, 4)
    vector = args.variant in ("vector_collate", "both")
    workers = 6 if args.variant in ("workers", "both") else 0
    data = Corpus(batch * (args.steps + 1), max_len, as_tensor=vector)
    loader = DataLoader(data, batch_size=batch, shuffle=False, num_workers=workers,
                        collate_fn=vector_collate if vector else python_collate,
                        pin_memory=CUDA and workers > 0, persistent_workers=workers > 0)
    torch.manual_seed(0)
    model = Classifier(dim, heads).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if CUDA else {}))
    timer = StepTimer()
    loss = torch.zeros(())
    it = iter(loader)
    for _ in range(args.steps):
        timer.tick()
        ids, mask, y = next(it)
        ids, mask, y = (t.to(DEVICE, non_blocking=True) for t in (ids, mask, y))
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            loss = F.cross_entropy(model(ids, mask).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"slow_collate variant={args.variant or 'baseline'} workers {workers} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
