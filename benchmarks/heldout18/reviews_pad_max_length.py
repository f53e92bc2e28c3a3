"""Fine-tuning of a BERT-base-sized encoder (8 blocks, width 768, bf16) to rate product reviews
1-5 stars, 64 reviews per batch whose lengths are 24-200 tokens (median ~80), fed the way a
tokenizer call with `padding="max_length", max_length=512` prepares them.

Baseline: every batch padded to 512 tokens: the encoder runs on 64 x 512 positions of which ~20 %
are real; the padding is masked out of attention (key padding mask) and of the mean pooling, but
every GEMM, LayerNorm and attention row still processes it. Variant `pad_to_longest`: dynamic
padding, each batch padded only to its longest review, rounded up to a multiple of 8
(`padding="longest"`, as `DataCollatorWithPadding(pad_to_multiple_of=8)` does): ~200 positions. Same function (masked positions never reach the
real ones); bf16 rounding may differ (other GEMM and attention shapes)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train

B, MAX_LEN, MAX_REVIEW, DIM, HEADS, LAYERS = (64, 512, 200, 768, 12, 8) if CUDA else (4, 64, 24, 32, 4, 2)
VOCAB, STARS, BATCHES, PAD = 30522, 5, 6, 0


class Rater(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM, padding_idx=PAD), nn.Embedding(MAX_LEN, DIM)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
        self.norm, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, STARS)

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos.weight[:t]
        mask = keep[:, None, None, :]  # (B, 1, 1, T): True = a real token, may be attended to

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        for blk in self.blocks:
            x = blk(x, attend)
        w = keep[..., None].to(x.dtype)
        return self.out((self.norm(x) * w).sum(1) / w.sum(1))  # mean over the real tokens


def main() -> None:
    args = options(__doc__ or "", ("pad_to_longest",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Rater()
        gen = torch.Generator(DEVICE).manual_seed(1)
        # review lengths: log-normal around a quarter of MAX_REVIEW, clipped to [MAX_REVIEW / 8, MAX_REVIEW]
        lens = (torch.randn(BATCHES, B, generator=gen) * 0.5).exp().mul(MAX_REVIEW * 0.4).long()
        lens = lens.clamp(MAX_REVIEW // 8, MAX_REVIEW)
        ids = torch.randint(1000, VOCAB, (BATCHES, B, MAX_LEN), generator=gen)
        keep = torch.arange(MAX_LEN) < lens[..., None]
        ids = torch.where(keep, ids, PAD)  # the tokenizer's max_length padding
        stars = torch.randint(0, STARS, (BATCHES, B), generator=gen)
    longest = lens.amax(1).tolist()  # known at collate time, before training
    opt = adamw(list(model.parameters()))
    dynamic = args.variant == "pad_to_longest"

    def loss_of(i: int) -> torch.Tensor:
        j = i % BATCHES
        t = -(-longest[j] // 8) * 8 if dynamic else MAX_LEN  # collator's pad_to_multiple_of=8
        x, k = ids[j, :, :t].contiguous(), keep[j, :, :t].contiguous()
        with bf16():
            logits = model(x, k)
        return F.cross_entropy(logits.float(), stars[j])

    train("reviews_pad_max_length", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
