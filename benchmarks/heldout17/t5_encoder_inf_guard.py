"""A compiled fp16 T5-style text encoder whose per-sublayer overflow guard is a Python `if` on a tensor.

Embedding prompts for retrieval or for a text-to-image model's conditioning: a T5-style encoder
(RMS layer norm without mean, relative position bias shared by all layers, ReLU feed-forward, no
biases; T5-base sized: width 768, 12 layers, 12 heads, feed-forward 3,072) in float16, on batches
of 64 prompts of 128 tokens, wrapped in `torch.compile` (default mode) and run under
`torch.inference_mode`. Like the original T5 code (cited from memory: Hugging Face
`T5LayerFF`/`T5Block`, before its rewrite), every sublayer ends with an fp16 overflow guard written
as a Python branch on a tensor: `if torch.isinf(h).any(): h = h.clamp(...)`. TorchDynamo cannot
trace a data-dependent Python branch, so the compiled model is cut at every sublayer (24 cuts per
forward pass), each cut a device-to-host sync followed by Python-side resumption before the next
piece can be launched.

Variants:
- baseline: `if torch.isinf(h).any(): clamp` after every attention and feed-forward sublayer.
- branchless_guard: the same guard without a branch, as the later T5 code writes it (cited from
  memory): `c = torch.where(torch.isinf(h).any(), fmax - 1000, fmax); h = h.clamp(-c, c)`, so the
  whole encoder is one graph. No value here overflows, so both compute the same numbers.

Sources: the `torch.compile` docstring (installed torch 2.13), the graph-break explanation Dynamo
itself printed for this branch in a CPU experiment ("Data-dependent branching ... consider making
the code branchless"), and the torch.compile troubleshooting docs on graph breaks (cited from memory).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

DTYPE = torch.float16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype)


def guard(h: torch.Tensor, branchless: bool) -> torch.Tensor:
    """Keep fp16 activations finite (T5 does this after each sublayer)."""
    fmax = torch.finfo(h.dtype).max
    if branchless:
        c = torch.where(torch.isinf(h).any(), fmax - 1000.0, fmax)
        return h.clamp(min=-c, max=c)
    if torch.isinf(h).any():
        h = h.clamp(min=-(fmax - 1000.0), max=fmax - 1000.0)
    return h


class T5Block(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, branchless: bool) -> None:
        super().__init__()
        self.heads, self.branchless = heads, branchless
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.wi, self.wo = nn.Linear(d, ff, bias=False), nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (m(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for m in (self.q, self.k, self.v))
        # T5 does not scale the scores; the position bias goes in as an additive mask
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)
        x = guard(x + self.o(a.transpose(1, 2).reshape(b, t, d)), self.branchless)
        x = guard(x + self.wo(F.relu(self.wi(self.ln2(x)))), self.branchless)
        return x


class T5Encoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, ff: int, layers: int, branchless: bool) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d)
        self.rel = nn.Embedding(32, heads)  # bucketed relative positions, shared by all layers
        self.blocks = nn.ModuleList(T5Block(d, heads, ff, branchless) for _ in range(layers))
        self.ln = RMSNorm(d)

    def buckets(self, t: int, device: torch.device) -> torch.Tensor:
        """T5's bidirectional log-spaced buckets (32 buckets, max distance 128)."""
        pos = torch.arange(t, device=device)
        rel = pos[None, :] - pos[:, None]
        half = 16
        out = (rel > 0).long() * half
        n = rel.abs()
        exact = half // 2
        large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(128 / exact) * (half - exact)).long()
        return out + torch.where(n < exact, n, large.clamp(max=half - 1))

    def forward(self, ids: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        t = ids.size(1)
        bias = self.rel(self.buckets(t, ids.device)).permute(2, 0, 1)[None]  # (1, H, T, T)
        bias = bias + torch.where(pad, torch.finfo(x.dtype).min, 0.0)[:, None, None, :].to(x.dtype)
        for blk in self.blocks:
            x = blk(x, bias)
        x = self.ln(x)
        keep = (~pad)[..., None].to(x.dtype)
        return (x * keep).sum(1) / keep.sum(1)  # mean-pooled prompt embedding


def main() -> None:
    args = options(__doc__, ("branchless_guard",)).parse_args()
    torch.manual_seed(0)
    batch, seq, d, heads, ff, layers = (64, 128, 768, 12, 3072, 12) if CUDA else (2, 16, 32, 4, 64, 2)
    vocab = 32128
    with torch.device(DEVICE):
        model = T5Encoder(vocab, d, heads, ff, layers, args.variant == "branchless_guard").to(DTYPE).eval()
    encode = torch.compile(model)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    prompts = torch.randint(1, vocab, (4, batch, seq), device=DEVICE, generator=gen)
    lengths = torch.randint(seq // 4, seq + 1, (4, batch, 1), device=DEVICE, generator=gen)
    pads = torch.arange(seq, device=DEVICE)[None, None, :] >= lengths
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            emb = encode(prompts[i % 4], pads[i % 4])
            total += emb.float().norm(dim=-1).mean()
            timer.end()
    timer.report(f"t5_encoder_inf_guard variant={args.variant or 'baseline'} mean embedding norm {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
