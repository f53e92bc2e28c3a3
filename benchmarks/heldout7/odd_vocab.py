"""Small GPT-2-tokenizer LM (vocabulary 50,257, tied input/output embedding) whose LM-head GEMMs have an odd dimension.

4 pre-norm blocks (width 768, 12 heads, causal SDPA, GELU MLP 3072), 16 x 512 tokens, bf16 autocast,
fused AdamW. Baseline: the embedding and tied head are (50,257 x 768), so the logits (8,192 x 50,257)
have an odd row stride and the head's forward GEMM and both backward GEMMs (grad of the hidden
states, grad of the embedding) see an unaligned leading dimension. Variant `pad_vocab`: the table is
padded to 50,304 rows (a multiple of 64; the 47 extra rows are zero and never looked up), the head
GEMMs run at N = 50,304 and the loss takes `logits[..., :50257]`; the same weights, the same loss (the
padded rows get zero gradient and stay zero under AdamW).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, adamw, bf16, options
from torch import nn


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class LM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, dim)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.wpe = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe
        for blk in self.blocks:
            x = blk(x, causal)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        if logits.size(-1) != self.vocab:
            logits = logits[..., : self.vocab]
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


def main() -> None:
    args = options(__doc__, ("pad_vocab",)).parse_args()
    batch, seq, vocab, dim, heads, layers, multiple = (16, 512, 50257, 768, 12, 4, 64) if CUDA else (2, 16, 203, 48, 4, 2, 16)
    rows = -(-vocab // multiple) * multiple if args.variant == "pad_vocab" else vocab
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LM(vocab, dim, heads, layers, seq)
        data = torch.randint(0, vocab, (4, batch, seq + 1))
        if rows != vocab:  # the same table with zero rows appended
            padded = nn.Embedding(rows, dim)
            with torch.no_grad():
                padded.weight.zero_()
                padded.weight[:vocab] = model.wte.weight
            model.wte = padded
    inputs, targets = data[:, :, :-1].contiguous(), data[:, :, 1:].contiguous()
    opt = adamw(list(model.parameters()))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            loss = model(inputs[i % 4], targets[i % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    assert rows == vocab or float(model.wte.weight.detach()[vocab:].abs().max()) == 0.0
    print(f"embedding rows {rows} for a vocabulary of {vocab}")
    timer.report(f"odd_vocab variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
