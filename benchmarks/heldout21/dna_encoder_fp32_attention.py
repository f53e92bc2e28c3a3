"""Genomic masked-LM encoder (6-mer tokens, 2,048-token windows, 6 blocks of width 512, bf16 autocast) whose
attention upcasts q, k and v to float32 "for stability" before `scaled_dot_product_attention`: flash attention
takes only fp16/bf16, so SDPA falls back to the float32 memory-efficient kernel, without tensor cores."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train
from torch import nn

VARIANT = "bf16_flash"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# windows per step, tokens per window, width, heads, blocks
BATCH, T, DIM, HEADS, LAYERS = (4, 2048, 512, 8, 6) if CUDA else (2, 64, 64, 4, 2)
VOCAB, MASK_ID = 4097, 4096  # 4^6 six-mers and a [MASK] token


def attend_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    with torch.autocast(DEVICE, enabled=False):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(q.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


with torch.device(DEVICE):
    emb = nn.Embedding(VOCAB, DIM)
    blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
    norm, head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB - 1)
    gen = torch.Generator(DEVICE).manual_seed(1)
    tokens = torch.randint(0, VOCAB - 1, (8, BATCH, T), generator=gen)
    masked = torch.rand(8, BATCH, T, generator=gen) < 0.15
    inputs = torch.where(masked, torch.full_like(tokens, MASK_ID), tokens)
opt = adamw([*emb.parameters(), *blocks.parameters(), *norm.parameters(), *head.parameters()])
fn = attend if args.variant == VARIANT else attend_fp32


def loss_of(i: int) -> torch.Tensor:
    with bf16():
        x = emb(inputs[i % 8])
        for blk in blocks:
            x = blk(x, fn)
        logits = head(norm(x))
    return F.cross_entropy(logits.float()[masked[i % 8]], tokens[i % 8][masked[i % 8]])


train("dna_encoder_fp32_attention", args.variant, args.steps, opt, loss_of)
