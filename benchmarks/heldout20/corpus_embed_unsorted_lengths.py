"""Semantic-search indexing: embedding 2,048 support articles (16-512 tokens) with a 4-layer encoder, batches in corpus order.

Baseline: each step embeds the next 256 articles in batches of 64 taken in corpus order, each batch
padded to its longest article: with a long-tailed length distribution almost every batch holds one
article near 400-512 tokens, so ~3-4x the real tokens go through every GEMM and attention row
(padding masked out of attention and of the mean pooling). Variant `length_sorted`: the same 256
articles sorted by length before batching (as sentence-transformers' `encode` does), each batch
padded to its own longest, embeddings put back in corpus order. Same per-article embeddings;
bf16 rounding may differ where another GEMM shape picks another kernel.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, encoder, options
from torch import nn

DOCS, MAXLEN, CHUNK, BATCH, DIM, HEADS, LAYERS, VOCAB, MEDIAN, MINLEN = (
    (2048, 512, 256, 64, 768, 12, 4, 30522, 110, 16) if CUDA else (32, 32, 16, 4, 32, 2, 1, 100, 10, 4))


@torch.no_grad()
def main() -> None:
    args = options(__doc__, ("length_sorted",)).parse_args()
    torch.manual_seed(0)
    body, _, _ = encoder(DIM, HEADS, LAYERS, 2)
    body.eval()
    with torch.device(DEVICE):
        tok_emb, pos_emb = nn.Embedding(VOCAB, DIM), nn.Embedding(MAXLEN, DIM)
    gen = torch.Generator().manual_seed(20)
    lengths = (torch.randn(DOCS, generator=gen) * 0.6 + math.log(MEDIAN)).exp().clamp(MINLEN, MAXLEN).long()
    ids = torch.randint(1, VOCAB, (DOCS, MAXLEN), generator=gen)
    ids[torch.arange(MAXLEN)[None, :] >= lengths[:, None]] = 0  # padding id
    ids, lengths_dev = ids.to(DEVICE), lengths.to(DEVICE)
    probe = torch.randn(DIM, generator=gen).to(DEVICE)
    # the batches of each chunk: (article indices on the device, padded length), planned once
    plans: list[list[tuple[torch.Tensor, int]]] = []
    for c in range(DOCS // CHUNK):
        docs = torch.arange(c * CHUNK, (c + 1) * CHUNK)
        if args.variant == "length_sorted":
            docs = docs[torch.argsort(lengths[docs], stable=True)]
        plans.append([(docs[j:j + BATCH].to(DEVICE), int(lengths[docs[j:j + BATCH]].max()))
                      for j in range(0, CHUNK, BATCH)])
    pos_ids = torch.arange(MAXLEN, device=DEVICE)

    def index_chunk(c: int) -> torch.Tensor:
        out = torch.empty(DOCS, DIM, device=DEVICE)
        for idx, width in plans[c]:
            x = ids[idx, :width]
            pad = pos_ids[None, :width] >= lengths_dev[idx][:, None]
            with bf16():
                h = body(tok_emb(x) + pos_emb(pos_ids[:width]), src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).float()
            pooled = (h.float() * keep).sum(1) / keep.sum(1)
            out[idx] = F.normalize(pooled, dim=-1)
        return out[c * CHUNK:(c + 1) * CHUNK]

    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        total += (index_chunk(i % (DOCS // CHUNK)) @ probe).sum()
        timer.end()
    timer.report(f"corpus_embed_unsorted_lengths variant={args.variant or 'baseline'} embedding checksum {total.item():.4f}")


if __name__ == "__main__":
    main()
