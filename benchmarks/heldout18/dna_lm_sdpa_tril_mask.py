"""Pre-training of a small causal DNA language model (nucleotide tokens, 4,096-base context, 8 blocks,
width 512, head dim 64, bf16) whose attention calls `F.scaled_dot_product_attention` but passes the
causal structure as an explicit mask, `attn_mask=torch.ones(T, T, dtype=torch.bool).tril()`.

Baseline: with a mask argument SDPA cannot use the flash kernel; it runs the masked
(memory-efficient) kernel, which reads the mask and computes every block of the 4,096 x 4,096 scores,
half of them only to mask them, forward and backward. Variant `is_causal`: the same call with
`is_causal=True` and no mask: the flash kernel, which skips the blocks above the diagonal. Same
function; bf16 rounding differs (different kernels)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train

B, T, DIM, HEADS, LAYERS = (8, 4096, 512, 8, 8) if CUDA else (2, 64, 32, 4, 2)
VOCAB, BATCHES = 16, 4  # A C G T N + special tokens, padded to 16


class DnaLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
        self.norm, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor, attend) -> torch.Tensor:
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, attend)
        return self.out(self.norm(x))


def main() -> None:
    args = options(__doc__ or "", ("is_causal",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = DnaLM()
        gen = torch.Generator(DEVICE).manual_seed(1)
        seqs = torch.randint(0, 5, (BATCHES, B, T + 1), generator=gen)
        causal = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    opt = adamw(list(model.parameters()))

    def masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal)

    def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    attend = flash if args.variant == "is_causal" else masked

    def loss_of(i: int) -> torch.Tensor:
        s = seqs[i % BATCHES]
        with bf16():
            logits = model(s[:, :-1], attend)
        return F.cross_entropy(logits.float().flatten(0, 1), s[:, 1:].flatten())

    train("dna_lm_sdpa_tril_mask", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
