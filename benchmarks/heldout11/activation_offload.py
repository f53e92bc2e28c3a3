"""Seq2seq (BART-style) training whose forward runs under `torch.autograd.graph.save_on_cpu(pin_memory=True)`.

Training loop. A summarisation-style encoder-decoder (token embedding shared with the tied LM head,
learned positions, 4 pre-norm encoder layers, 4 pre-norm decoder layers with causal self-attention
and cross-attention, width 768, 12 heads, GELU MLP 3072, 32,000-token vocabulary), 8 documents of
256 source tokens and 64 target tokens per step, bf16 autocast, fused AdamW. The baseline wraps the
forward and the loss in `torch.autograd.graph.save_on_cpu(pin_memory=True)` (activation offloading,
kept from a run on a smaller GPU): every tensor autograd saves for backward (activations and the
bf16 weight copies) is copied to pinned host memory in the forward and back to the GPU in the
backward, in stream order with the compute. The activations fit on the GPU many times over.

Variant `on_gpu`: the same step without the context (autograd keeps the saved tensors on the GPU).
"""

import contextlib

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("on_gpu",)
if CUDA:
    BATCH, SRC, TGT, DIM, HEADS, LAYERS, VOCAB = 8, 256, 64, 768, 12, 4, 32000
else:
    BATCH, SRC, TGT, DIM, HEADS, LAYERS, VOCAB = 2, 32, 8, 64, 4, 2, 512


class Block(nn.Module):
    """Pre-norm self-attention (causal in the decoder), optional cross-attention, GELU MLP."""

    def __init__(self, dim: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.cross = cross
        if cross:
            self.n2 = nn.LayerNorm(dim)
            self.cq, self.ckv, self.co = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def merge(self, t: torch.Tensor) -> torch.Tensor:
        b, h, n, e = t.shape
        return t.transpose(1, 2).reshape(b, n, h * e)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(self.n1(x)).chunk(3, -1)
        att = F.scaled_dot_product_attention(self.split(q), self.split(k), self.split(v), is_causal=self.cross)
        x = x + self.o(self.merge(att))
        if memory is not None:
            k, v = self.ckv(memory).chunk(2, -1)
            att = F.scaled_dot_product_attention(self.split(self.cq(self.n2(x))), self.split(k), self.split(v))
            x = x + self.co(self.merge(att))
        return x + self.down(F.gelu(self.up(self.n3(x))))


class Seq2Seq(nn.Module):
    """Shared embedding, learned positions, encoder and decoder stacks, tied LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.src_pos = nn.Parameter(torch.randn(SRC, DIM) * 0.02)
        self.tgt_pos = nn.Parameter(torch.randn(TGT, DIM) * 0.02)
        self.enc = nn.ModuleList(Block(DIM, HEADS, cross=False) for _ in range(LAYERS))
        self.dec = nn.ModuleList(Block(DIM, HEADS, cross=True) for _ in range(LAYERS))
        self.enc_norm, self.dec_norm = nn.LayerNorm(DIM), nn.LayerNorm(DIM)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        h = self.emb(src) + self.src_pos
        for blk in self.enc:
            h = blk(h)
        memory = self.enc_norm(h)
        y = self.emb(tgt_in) + self.tgt_pos
        for blk in self.dec:
            y = blk(y, memory)
        logits = F.linear(self.dec_norm(y), self.emb.weight)
        return F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = Seq2Seq().to(DEVICE)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    pool = 4
    src = torch.randint(0, VOCAB, (pool, BATCH, SRC), device=DEVICE, generator=gen)
    tgt = torch.randint(0, VOCAB, (pool, BATCH, TGT + 1), device=DEVICE, generator=gen)

    def offload() -> "contextlib.AbstractContextManager[object]":
        if args.variant == "on_gpu":
            return contextlib.nullcontext()
        return torch.autograd.graph.save_on_cpu(pin_memory=CUDA)

    def loss_of(i: int) -> torch.Tensor:
        j = i % pool
        with offload(), bf16():
            return model(src[j], tgt[j, :, :-1], tgt[j, :, 1:])

    train("activation_offload", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
