"""An `nn.Transformer` translation model trained in float32 (no autocast, no TF32), as in the PyTorch tutorial.

`Seq2SeqTransformer` from the language-translation tutorial, wider: source and target token
embeddings (16,000 tokens each, scaled by sqrt(d)), sinusoidal positions, `nn.Transformer`
(d_model 1024, 16 heads, 3 encoder + 3 decoder layers, feed-forward 4096, dropout 0.1,
batch_first), a generator Linear to the target vocabulary; 48 sentence pairs per step of 40-64
tokens padded to 64, key-padding masks, a boolean causal target mask, cross-entropy ignoring the
pad token, `torch.optim.Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)`. Everything runs in float32
with PyTorch's default `float32_matmul_precision("highest")`: no tensor cores for the GEMMs.
Variants: `tf32` (`torch.set_float32_matmul_precision("high")`: TF32 tensor cores), `bf16`
(forward and loss under `torch.autocast("cuda", dtype=torch.bfloat16)`; weights stay float32).
"""

import contextlib
import math

import torch
from _common import CUDA, DEVICE, bf16, options, train
from torch import nn

args = options(__doc__, ("tf32", "bf16")).parse_args()
torch.manual_seed(0)
if CUDA:
    D, HEADS, ENC, DEC, FF, VOCAB, BATCH, MAXLEN, MINLEN = 1024, 16, 3, 3, 4096, 16000, 48, 64, 40
else:
    D, HEADS, ENC, DEC, FF, VOCAB, BATCH, MAXLEN, MINLEN = 32, 4, 1, 1, 64, 200, 4, 12, 8
PAD_IDX, BOS_IDX, EOS_IDX = 1, 2, 3
if args.variant == "tf32":
    torch.set_float32_matmul_precision("high")


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(0))

    def forward(self, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.dropout(token_embedding + self.pos_embedding[:, : token_embedding.size(1)])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.Transformer(d_model=D, nhead=HEADS, num_encoder_layers=ENC, num_decoder_layers=DEC,
                                          dim_feedforward=FF, dropout=0.1, batch_first=True)
        self.generator = nn.Linear(D, VOCAB)
        self.src_tok_emb, self.tgt_tok_emb = TokenEmbedding(VOCAB, D), TokenEmbedding(VOCAB, D)
        self.positional_encoding = PositionalEncoding(D, dropout=0.1)

    def forward(self, src: torch.Tensor, trg: torch.Tensor, tgt_mask: torch.Tensor,
                src_padding_mask: torch.Tensor, tgt_padding_mask: torch.Tensor) -> torch.Tensor:
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, tgt_mask=tgt_mask, src_key_padding_mask=src_padding_mask,
                                tgt_key_padding_mask=tgt_padding_mask, memory_key_padding_mask=src_padding_mask)
        return self.generator(outs)


def sentence_batch(rng: torch.Generator, n: int, maxlen: int) -> torch.Tensor:
    """BOS, tokens, EOS, then PAD to maxlen; lengths uniform in [MINLEN, maxlen]."""
    lengths = torch.randint(MINLEN, maxlen + 1, (n,), generator=rng)
    out = torch.full((n, maxlen), PAD_IDX, dtype=torch.long)
    for j, length in enumerate(lengths.tolist()):
        out[j, 0] = BOS_IDX
        out[j, 1:length - 1] = torch.randint(4, VOCAB, (length - 2,), generator=rng)
        out[j, length - 1] = EOS_IDX
    return out


with torch.device(DEVICE):
    model = Seq2SeqTransformer()
for p in model.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_IDX)

rng = torch.Generator().manual_seed(1)
batches = [(sentence_batch(rng, BATCH, MAXLEN).to(DEVICE), sentence_batch(rng, BATCH, MAXLEN + 1).to(DEVICE))
           for _ in range(4)]
tgt_mask = torch.triu(torch.ones(MAXLEN, MAXLEN, dtype=torch.bool, device=DEVICE), diagonal=1)


def loss_of(i: int) -> torch.Tensor:
    src, tgt = batches[i % 4]
    tgt_input, tgt_out = tgt[:, :-1], tgt[:, 1:]
    with bf16() if args.variant == "bf16" else contextlib.nullcontext():
        logits = model(src, tgt_input, tgt_mask, src == PAD_IDX, tgt_input == PAD_IDX)
        return loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))


train("translation_fp32", args.variant, args.steps, optimizer, loss_of)
