"""Product-review star-rating training with `gc.collect()` after every step (host-side work on the step's thread).

Workload: a 6-layer pre-norm `nn.TransformerEncoder` of width 768 (12 heads, padding mask, masked mean
pooling, 5 star classes) trained with bf16 autocast and fused AdamW on 64 reviews of up to 256 tokens
per step. The corpus is held as the script loaded it from JSON lines: a list of 8,000 record dicts
(id, stars, token list), with one padded token tensor built from them at start and kept on the GPU.

Cause (baseline): the loop calls `gc.collect()` after every optimizer step, "to free memory" (the
`gc.collect(); torch.cuda.empty_cache()` habit of notebooks and copied training scripts; only the
collection is kept here). A full collection walks every tracked Python object of the process
(torch's modules, functions and classes, the model, the corpus records: ~190,000 tracked
objects), tens of milliseconds on the step's thread, during which no kernel of the next step is
queued; the GPU finishes the step's work and waits.

Fix (`--variant no_gc_collect`): drop the per-step collection and leave garbage collection to
CPython's automatic, generational collector. The same batches, weights and updates: the losses are
identical.
"""

import gc

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, encoder, options, train
from torch import nn

VARIANTS = ("no_gc_collect",)
DIM, HEADS, LAYERS, SEQ, BATCH, RECORDS, VOCAB = (
    (768, 12, 6, 256, 64, 8000, 30000) if CUDA else (64, 4, 2, 32, 4, 64, 500))
STARS = 5


def load_corpus() -> list[dict[str, object]]:
    """The reviews as JSON-lines records: id, star rating and the tokenizer's ids as a Python list."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(SEQ // 4, SEQ + 1, size=RECORDS)
    return [{"id": f"r{i:06d}", "stars": int(rng.integers(0, STARS)), "tokens": rng.integers(1, VOCAB, size=n).tolist()}
            for i, n in enumerate(lengths)]


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    records = load_corpus()
    padded = np.zeros((len(records), SEQ), dtype=np.int64)
    for row, rec in zip(padded, records, strict=True):
        toks = rec["tokens"]
        assert isinstance(toks, list)
        row[: len(toks)] = toks
    tokens = torch.from_numpy(padded).to(DEVICE)
    stars = torch.tensor([rec["stars"] for rec in records], device=DEVICE)
    pad = tokens == 0

    torch.manual_seed(0)
    body, head, params = encoder(DIM, HEADS, LAYERS, STARS)
    with torch.device(DEVICE):
        embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        pos = nn.Parameter(torch.randn(1, SEQ, DIM) * 0.02)
    opt = adamw([*params, *embed.parameters(), pos])
    order = torch.randperm(len(records), device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))

    def loss_of(i: int) -> torch.Tensor:
        idx = order[(i * BATCH) % len(records):(i * BATCH) % len(records) + BATCH]
        keep = (~pad[idx]).unsqueeze(-1)
        with bf16():
            h = body(embed(tokens[idx]) + pos, src_key_padding_mask=pad[idx])
            pooled = (h * keep).sum(1) / keep.sum(1)
            return F.cross_entropy(head(pooled), stars[idx])

    def collect(loss: torch.Tensor) -> None:
        gc.collect()

    train("review_sentiment_gc_collect", args.variant, args.steps, opt, loss_of,
          after=collect if args.variant is None else None)
    assert len(records) == RECORDS  # the records stay alive for the whole run, as in the original script


if __name__ == "__main__":
    main()
