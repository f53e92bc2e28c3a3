"""Training of a decoder-only music transformer on MIDI event tokens (6 blocks, width 768, 12 heads,
16 x 1,024 events, bf16) whose attention follows the popular from-scratch tutorial layout: a
`ModuleList` of 12 `Head` modules, each with its own `key`, `query` and `value` `nn.Linear(768, 64)`.

Baseline: 36 skinny projection GEMMs per block (N = 64, K = 768, M = 16,384), each re-reading the
whole 16,384 x 768 input, then stacked into (B, H, T, 64); in backward 36 weight-gradient GEMMs
re-read it again and 36 input-gradient GEMMs each write a full 16,384 x 768 gradient that autograd
sums. Variant `fused_qkv`: the same weights concatenated into one `nn.Linear(768, 3 x 768)`: one GEMM
forward, two backward. Both then call the same causal SDPA. Same function; bf16 rounding may differ
(other GEMM kernels)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, adamw, bf16, options, train

B, T, DIM, HEADS, LAYERS = (16, 1024, 768, 12, 6) if CUDA else (2, 32, 64, 4, 2)
HS, VOCAB, BATCHES = DIM // HEADS, 512, 4  # note-on/off, time-shift and velocity events


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(DIM, HS, bias=False) for _ in range(3))


class Block(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.heads = nn.ModuleList(Head() for _ in range(HEADS))
        if fused:  # one Linear holding every head's query, key and value weights
            self.qkv = nn.Linear(DIM, 3 * DIM, bias=False, device="meta")  # no draw: the same RNG stream
            self.qkv.weight = nn.Parameter(torch.cat([torch.cat([getattr(h, n).weight.detach() for h in self.heads])
                                                      for n in ("query", "key", "value")]))
            del self.heads
        self.proj = nn.Linear(DIM, DIM)
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.ff = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.n1(x)
        if self.fused:
            q, k, v = self.qkv(h).view(b, t, 3, HEADS, HS).permute(2, 0, 3, 1, 4)
        else:
            q = torch.stack([hd.query(h) for hd in self.heads], 1)
            k = torch.stack([hd.key(h) for hd in self.heads], 1)
            v = torch.stack([hd.value(h) for hd in self.heads], 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.ff(self.n2(x))


class MusicGPT(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(T, DIM)
        self.blocks = nn.ModuleList(Block(fused) for _ in range(LAYERS))
        self.norm, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.out(self.norm(x))


def main() -> None:
    args = options(__doc__ or "", ("fused_qkv",)).parse_args()
    torch.manual_seed(0)  # the same draws in both: the fused weights are copied from the heads
    with torch.device(DEVICE):
        model = MusicGPT(args.variant == "fused_qkv")
        gen = torch.Generator(DEVICE).manual_seed(1)
        seqs = torch.randint(0, VOCAB, (BATCHES, B, T + 1), generator=gen)
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        s = seqs[i % BATCHES]
        with bf16():
            logits = model(s[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), s[:, 1:].flatten())

    train("midi_gpt_per_head_linears", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
