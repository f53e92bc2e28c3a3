"""Perplexity of a symbolic-music LM whose causal Triton flash-attention kernel visits every key block.

A MIDI-event language model (REMI-style vocabulary of 1,024 events, 4 pre-norm blocks of width 768,
12 heads of 64, bf16, inference) scores 2 piano pieces of 16,384 events per step. Attention is the
user's own Triton flash-attention forward (online softmax, 128 x 64 tiles, 4 warps, 3 stages): each
program owns 128 query rows and loops over *all* key blocks, masking the future with `tl.where`.
Blocks entirely above the diagonal contribute exactly nothing (their probabilities are 0), yet
their `tl.dot`s, exponentials and loads run: about twice the attention work of a causal kernel.

--variant causal_block_skip: the loop stops at the diagonal block, `hi = (start_m + 1) * BLOCK_M`,
as in Triton's fused-attention tutorial: the same tiles, the same order of the blocks it does visit.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("causal_block_skip",)).parse_args()
if CUDA:
    DIM, HEADS, LAYERS, VOCAB, BATCH, LEN, BM, BN, WARPS = 768, 12, 4, 1024, 2, 16384, 128, 64, 4
else:
    DIM, HEADS, LAYERS, VOCAB, BATCH, LEN, BM, BN, WARPS = 32, 2, 2, 64, 1, 64, 32, 16, 4
HD = DIM // HEADS
DTYPE = torch.bfloat16 if CUDA else torch.float32


@triton.jit
def causal_attention(q_ptr, k_ptr, v_ptr, o_ptr, T, scale, sqb, sqh, sqt, sob, soh, sot,
                     H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     SKIP_MASKED: tl.constexpr):
    start_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    base = b * sqb + h * sqh
    q = tl.load(q_ptr + base + offs_m[:, None] * sqt + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    qk_scale = scale * 1.4426950408889634  # log2(e): exp2 below
    if SKIP_MASKED:  # noqa: SIM108 (a constexpr branch, kept as Triton's tutorials write it)
        hi = (start_m + 1) * BLOCK_M
    else:
        hi = T
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + base + cols[None, :] * sqt + offs_d[:, None])
        s = tl.dot(q, k) * qk_scale
        s = tl.where(offs_m[:, None] >= cols[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + cols[:, None] * sqt + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    out = o_ptr + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :]
    tl.store(out, acc.to(o_ptr.dtype.element_ty))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v: (B, T, H, D) views sharing strides (slices of one qkv tensor); returns (B, T, H, D)."""
    b, t, h, d = q.shape
    o = torch.empty(b, t, h, d, device=q.device, dtype=q.dtype)
    causal_attention[(t // BM, b * h)](
        q, k, v, o, t, d ** -0.5, q.stride(0), q.stride(2), q.stride(1), o.stride(0), o.stride(2), o.stride(1),
        H=h, D=d, BLOCK_M=BM, BLOCK_N=BN, SKIP_MASKED=args.variant == "causal_block_skip",
        num_warps=WARPS, num_stages=3)
    return o


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HD).unbind(2)
        x = x + self.o(attention(q, k, v).view(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.n2(x)), approximate="tanh"))


class MidiLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(LEN, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.norm(x[:, :-1]))
        return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())


torch.manual_seed(0)
with torch.device(DEVICE):
    model = MidiLM().to(DTYPE).eval()
gen = torch.Generator(DEVICE).manual_seed(23)
pieces = torch.randint(0, VOCAB, (8, BATCH, LEN), device=DEVICE, generator=gen)

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for i in range(args.steps):
        timer.tick()
        total += model(pieces[i % len(pieces)])
        timer.end()
timer.report(f"triton_midi_causal_all_blocks variant={args.variant or 'baseline'} "
             f"mean perplexity {torch.exp(total / args.steps).item():.5f}")
