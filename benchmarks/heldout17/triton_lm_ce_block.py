"""Perplexity evaluation of a GPT-style LM with a hand-written Triton cross-entropy kernel launched with a tiny block.

A validation pass of a small decoder-only language model (a speculative-decoding draft model: bf16,
4 pre-norm blocks with causal SDPA, width 512, vocabulary 32,768, 32 sequences of 1,024 tokens): the final hidden states go through the LM head, and the per-token
loss comes from the user's own Triton kernel, an online-logsumexp cross-entropy with one program
per token row that walks across the vocabulary in chunks of `BLOCK` logits. The baseline launches it
the way a first Triton kernel is often written, with a small `BLOCK=64` and the default
`num_warps=4`: 512 chunk loads of 128 bytes per row (with 128 threads for 64 lanes, half of them
duplicate work), so each program mostly waits on memory latency and the kernel reaches a fraction
of the memory bandwidth.

Variants:
- baseline: `BLOCK=64`, `num_warps=4`.
- wide_block: the same kernel with `BLOCK=4096`, `num_warps=8` (32 KiB-wide vector loads per chunk,
  8 chunks per row), which is what tuning the launch (or `triton.autotune`) picks for a
  bandwidth-bound row reduction.

Sources: the Triton tutorial "Fused Softmax" (one program per row, `BLOCK_SIZE` the next power of
two of the row, `num_warps` raised with the block) and `triton.Config` / `triton.autotune`'s
docstrings in the installed triton 3.9 (`num_warps`: "the number of warps to use for the kernel
when compiled for GPUs"); cited otherwise from memory.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU check runs the kernel in Triton's interpreter

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


@triton.jit
def ce_row_kernel(logits_ptr, target_ptr, loss_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    """loss[row] = logsumexp(logits[row]) - logits[row, target[row]], one pass with a running max."""
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    tgt = tl.load(target_ptr + row)
    x_t = tl.load(base + tgt).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(total) + row_max - x_t)


def triton_cross_entropy(logits: torch.Tensor, target: torch.Tensor, block: int, warps: int) -> torch.Tensor:
    rows, cols = logits.shape
    loss = torch.empty(rows, device=logits.device, dtype=torch.float32)
    ce_row_kernel[(rows,)](logits, target, loss, logits.stride(0), cols, BLOCK=block, num_warps=warps)
    return loss


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.n2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, ctx: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, ("wide_block",)).parse_args()
    torch.manual_seed(0)
    batch, ctx, d, heads, layers, vocab = (32, 1024, 512, 8, 4, 32768) if CUDA else (2, 16, 32, 4, 1, 300)
    block, warps = (4096, 8) if args.variant == "wide_block" else (64, 4)
    if not CUDA:
        block = min(block, 128)  # the interpreter's check: same kernel, small rows (baseline 64, variant 128)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = GPT(vocab, d, heads, layers, ctx).to(dtype).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    tokens = torch.randint(0, vocab, (4, batch, ctx + 1), device=DEVICE, generator=gen)
    timer = StepTimer()
    nll = torch.zeros((), device=DEVICE, dtype=torch.float64)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            seq = tokens[i % 4]
            logits = model(seq[:, :-1]).view(-1, vocab)
            loss = triton_cross_entropy(logits, seq[:, 1:].reshape(-1), block, warps)
            nll += loss.double().mean()
            timer.end()
    ppl = float(torch.exp(nll / args.steps))
    timer.report(f"triton_lm_ce_block variant={args.variant or 'baseline'} perplexity {ppl:.3f}")


if __name__ == "__main__":
    main()
