"""Genomic masked-LM pretraining on fixed-length windows, with an all-ones padding mask passed to SDPA.

Workload: a Nucleotide-Transformer-style DNA language model: non-overlapping 6-mer tokens (4,096
k-mers + 8 special tokens), learned positions, 6 pre-norm encoder layers of width 768 (12 heads of 64,
GELU MLP 3072, no dropout), LayerNorm, LM head over the 4,104 tokens; BERT-style masking of 15 % of
the tokens (80 / 10 / 10), cross-entropy on the masked positions (`ignore_index=-100`), bf16 autocast,
fused AdamW; 4 windows of 4,096 tokens (24.6 kb of sequence each) per step, cut from a synthetic
genome, so every window is full. The batch carries a tokenizer-style `attention_mask` of ones, and
the model, written for padded batches, turns it into a (B, 1, 1, T) boolean mask that every layer
hands to `F.scaled_dot_product_attention(..., attn_mask=mask)`.

Variant `no_mask`: the training loop passes `attention_mask=None` (the windows are never padded), so
SDPA gets no mask; with every key allowed the layers compute the same thing.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

KMERS, SPECIAL = 4096, 8
VOCAB = KMERS + SPECIAL
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
if CUDA:
    DIM, HEADS, LAYERS, SEQ, BATCH, GENOME = 768, 12, 6, 4096, 4, 1 << 20
else:
    DIM, HEADS, LAYERS, SEQ, BATCH, GENOME = 64, 4, 2, 64, 2, 4096


class EncoderLayer(nn.Module):
    """Pre-norm self-attention (fused qkv, SDPA) and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))


class DnaMaskedLM(nn.Module):
    """Token and position embeddings, encoder layers, final norm and LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.pos = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(EncoderLayer(DIM, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids) + self.pos(positions)
        mask = None
        if attention_mask is not None:
            mask = attention_mask[:, None, None, :].bool()  # (B, 1, 1, T), True where a key may be attended
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.norm(x))


def mlm_batch(genome: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """BATCH windows of SEQ tokens ([CLS] + k-mers + [SEP]), 15 % of the k-mers masked BERT-style."""
    starts = torch.randint(0, genome.numel() - SEQ, (BATCH,), device=DEVICE, generator=gen)
    kmers = genome[starts[:, None] + torch.arange(SEQ - 2, device=DEVICE)] + SPECIAL
    cls = torch.full((BATCH, 1), CLS, device=DEVICE)
    sep = torch.full((BATCH, 1), SEP, device=DEVICE)
    ids = torch.cat([cls, kmers, sep], 1)
    u = torch.rand(BATCH, SEQ, device=DEVICE, generator=gen)
    pick = torch.rand(BATCH, SEQ, device=DEVICE, generator=gen)
    special = ids < SPECIAL
    chosen = (u < 0.15) & ~special
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    random_ids = torch.randint(SPECIAL, VOCAB, ids.shape, device=DEVICE, generator=gen)
    ids = torch.where(chosen & (pick < 0.8), torch.full_like(ids, MASK), ids)
    ids = torch.where(chosen & (pick >= 0.8) & (pick < 0.9), random_ids, ids)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def main() -> None:
    args = options(__doc__, ("no_mask",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = DnaMaskedLM()
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    # a synthetic genome of GENOME x 6 bases, tokenised into non-overlapping 6-mer ids
    bases = torch.randint(0, 4, (GENOME, 6), device=DEVICE, generator=gen)
    genome = (bases * 4 ** torch.arange(5, -1, -1, device=DEVICE)).sum(1)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        batch = mlm_batch(genome, gen)
        attention_mask = None if args.variant == "no_mask" else batch["attention_mask"]
        with bf16():
            logits = model(batch["input_ids"], attention_mask=attention_mask)
            loss = F.cross_entropy(logits.view(-1, VOCAB), batch["labels"].view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"dna_padding_mask variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
