"""Training a SASRec-style next-item recommender whose item table has `num_items + 1` rows (row 0 = padding).

A self-attentive sequential recommender: a user's last 128 interactions (item ids, 0 = padding) go
through a 2-block causal transformer (width 768, 12 heads), and every position scores the whole
catalog of 50,000 items with the tied item-embedding table (full softmax; cross-entropy on the next
item, computed after the autocast block on the bf16 logits), bf16 autocast, fused AdamW. As in most
recommender code, the table is
`nn.Embedding(num_items + 1, d, padding_idx=0)`: 50,001 rows, an odd number. The catalog-scoring
GEMMs (forward `h @ E.T`, and the two backward GEMMs) then have a leading dimension of 50,001
elements, which is not a multiple of 8 (16 bytes of bf16), so cuBLAS cannot use its aligned
tensor-core kernels for them.

Variants:
- baseline: 50,001 rows.
- padded_catalog: the same table padded to 50,048 rows (the next multiple of 64); the 47 extra
  rows are never an input or a target, get a -inf logit bias so they take no probability mass,
  and the loss is the same as the baseline's.

Sources: NVIDIA's "Matrix Multiplication Background" / "Tensor Core requirements" performance guide
(dimensions multiples of 8 for fp16/bf16), and the vocabulary-padding change of nanoGPT
(50,257 -> 50,304), cited from memory; `torch.nn.Embedding`'s docstring (`padding_idx`) in the
installed torch 2.13.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


class SASRec(nn.Module):
    def __init__(self, rows: int, real_rows: int, d: int, heads: int, blocks: int, seq: int) -> None:
        super().__init__()
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.body = nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.items = nn.Embedding(rows, d, padding_idx=0)  # last: its (overwritten) init draws `rows`-dependent numbers
        # 0 for real rows, -inf for padding rows added only to round the table up (none in the baseline)
        self.register_buffer("row_bias", torch.where(torch.arange(rows) < real_rows, 0.0, float("-inf")))
        self.padded = rows != real_rows

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        t = seq.size(1)
        h = self.items(seq) * (self.items.embedding_dim**0.5) + self.pos.weight[:t]
        causal = torch.ones(t, t, dtype=torch.bool, device=seq.device).triu(1)
        h = self.norm(self.body(h, mask=causal, is_causal=True))
        # score every item with the tied table
        return F.linear(h, self.items.weight, self.row_bias if self.padded else None)


def main() -> None:
    args = options(__doc__, ("padded_catalog",)).parse_args()
    torch.manual_seed(0)
    num_items, batch, seq, d, heads, blocks = (50_000, 64, 128, 768, 12, 2) if CUDA else (997, 2, 16, 32, 4, 1)
    real_rows = num_items + 1
    rows = (real_rows + 63) // 64 * 64 if args.variant == "padded_catalog" else real_rows
    with torch.device(DEVICE):
        model = SASRec(rows, real_rows, d, heads, blocks, seq)
        # the same initial weights for the real rows in both variants
        g = torch.Generator(device=DEVICE).manual_seed(2)
        table = torch.randn(real_rows, d, generator=g, device=DEVICE) * 0.02
        with torch.no_grad():
            model.items.weight.zero_()
            model.items.weight[:real_rows] = table
            model.items.weight[0] = 0.0
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    hist = torch.randint(1, real_rows, (4, batch, seq + 1), device=DEVICE, generator=gen)
    lens = torch.randint(seq // 4, seq + 2, (4, batch, 1), device=DEVICE, generator=gen)
    hist = torch.where(torch.arange(seq + 1, device=DEVICE) >= (seq + 1 - lens), hist, 0)  # left-padded histories
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    for i in range(args.steps):
        timer.tick()
        s = hist[i % 4]
        with bf16():
            logits = model(s[:, :-1])
        loss = F.cross_entropy(logits.view(-1, rows), s[:, 1:].reshape(-1), ignore_index=0)  # on the bf16 logits
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"sasrec_catalog_plus_one variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
