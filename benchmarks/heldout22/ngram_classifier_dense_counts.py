"""Hashed n-gram text classifier fed a dense bag-of-n-grams count matrix (GEMM shapes).

Workload: a fastText-style topic classifier (unigrams and bigrams hashed into 524,288 buckets, a
bucket embedding table of width 128, the average of a document's n-gram vectors, a linear layer to 14
topics) trained with bf16 autocast and fused AdamW on 2,048 documents per step (40-600 n-grams each,
~320 on average), from a pre-hashed pool kept on the GPU as flat ids with per-document offsets.

Cause (baseline): the document features are built the bag-of-words way, as a dense (2,048 x 524,288)
count matrix (`index_add_` of ones into a zeroed bf16 tensor), multiplied by the table like any other
Linear input: a GEMM with K = 524,288 whose left operand is >99.9 % zeros. Every step writes the
2.1 GB matrix, reads it in the forward GEMM and again in the backward GEMM for the table's gradient
(M = 524,288, N = 128, K = 2,048), to sum ~655 k table rows.

Fix (`--variant embedding_bag`): `F.embedding_bag(ids, table, offsets, mode="sum")` on the flat ids, as
PyTorch's text-classification tutorial does with `nn.EmbeddingBag`: a gather-and-sum of the rows each
document uses, and a scatter of the same rows in the backward. The same table, sums, averages and
updates; rounding differs: the baseline's GEMM reads the table in bf16 (autocast) and returns bf16
sums, the bag sums float32 rows in float32, so the losses agree to about three digits.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("embedding_bag",)
BUCKETS, DIM, DOCS, MIN_LEN, MAX_LEN = (2**19, 128, 2048, 40, 600) if CUDA else (4096, 16, 8, 5, 40)
TOPICS, POOL = 14, 4
COUNT_DTYPE = torch.bfloat16 if CUDA else torch.float32  # counts are small integers: exact in bf16


def make_pool(gen: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """POOL batches of pre-hashed documents: flat n-gram ids, offsets, lengths, owner of each id, topic."""
    pool = []
    for _ in range(POOL):
        lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (DOCS,), device=DEVICE, generator=gen)
        total = int(lengths.sum())
        # a skewed bucket distribution (frequent n-grams share buckets), as hashed text has
        ids = (torch.rand(total, device=DEVICE, generator=gen) ** 3 * BUCKETS).long()
        offsets = torch.cumsum(lengths, 0) - lengths
        owner = torch.repeat_interleave(torch.arange(DOCS, device=DEVICE), lengths)
        topic = torch.randint(0, TOPICS, (DOCS,), device=DEVICE, generator=gen)
        pool.append({"ids": ids, "offsets": offsets, "lengths": lengths, "owner": owner, "topic": topic})
    return pool


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    dense = args.variant is None
    torch.manual_seed(0)
    with torch.device(DEVICE):
        table = nn.Parameter(torch.empty(BUCKETS, DIM).uniform_(-1 / DIM, 1 / DIM))
        head = nn.Linear(DIM, TOPICS)
    pool = make_pool(torch.Generator(DEVICE).manual_seed(1))
    opt = adamw([table, *head.parameters()])

    def loss_of(i: int) -> torch.Tensor:
        b = pool[i % POOL]
        if dense:
            counts = torch.zeros(DOCS, BUCKETS, device=DEVICE, dtype=COUNT_DTYPE)
            ones = torch.ones_like(b["ids"], dtype=COUNT_DTYPE)
            counts.view(-1).index_add_(0, b["owner"] * BUCKETS + b["ids"], ones)
            with bf16():
                sums = counts @ table
        else:
            sums = F.embedding_bag(b["ids"], table, b["offsets"], mode="sum")
        with bf16():
            logits = head(sums / b["lengths"][:, None])
        return F.cross_entropy(logits.float(), b["topic"])

    train("ngram_classifier_dense_counts", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
