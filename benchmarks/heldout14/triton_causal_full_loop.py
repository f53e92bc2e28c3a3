"""Long-document scoring with a user Triton causal attention kernel that visits every key block.

Workload: perplexity scoring with a byte-level causal LM (259 tokens: 256 bytes and 3 specials,
learned absolute positions, 4 pre-norm blocks of width 1024, 16 heads of 64, GELU MLP 4096, tied
head), bf16, inference mode, one 16,384-byte document per step; the mean next-byte negative
log-likelihood is accumulated on the GPU. Attention is a user Triton flash-attention forward (online
softmax, fp32 accumulator, BLOCK_M 128 x BLOCK_N 64, 4 warps, 2 stages) reading q, k and v in place
from the fused qkv projection. Its key loop runs over all key blocks, `for start_n in range(0, N_CTX,
BLOCK_N)`, and applies the causal mask with `tl.where` in every iteration, so the blocks above the
diagonal, where every score is masked, are loaded and multiplied too (about twice the causal work).

Variant `causal_bound`: the same kernel with the loop stopped at the diagonal, `range(0, (start_m +
1) * BLOCK_M, BLOCK_N)`; the blocks it skips add exact zeros, so the output is the same.

Variant `compiled` (extra, timed but not recorded): the baseline model (its full-loop Triton kernel
included) under `torch.compile` (default mode).

Without CUDA the kernels run in Triton's interpreter (`TRITON_INTERPRET=1`) at tiny sizes, and under
`compiled` the kernel's launcher is left out of the graph there (the interpreter cannot run inside
a dynamo trace).
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

if CUDA:
    DIM, HEADS, LAYERS, SEQ, BLOCK_M, BLOCK_N = 1024, 16, 4, 16384, 128, 64
else:
    DIM, HEADS, LAYERS, SEQ, BLOCK_M, BLOCK_N = 64, 4, 2, 64, 16, 16
VOCAB = 259
HEAD_DIM = DIM // HEADS
DTYPE = torch.bfloat16 if CUDA else torch.float32


@triton.jit
def causal_attn_kernel(QKV, Out, sm_scale, N_CTX, stride_qt, stride_ot, n_heads,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BOUND_AT_DIAGONAL: tl.constexpr):
    """Causal attention for one (query block, head): q, k, v are column slices of the fused qkv rows."""
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    width = n_heads * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(QKV + offs_m[:, None] * stride_qt + head * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < N_CTX,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if BOUND_AT_DIAGONAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < N_CTX
        k = tl.load(QKV + offs_n[:, None] * stride_qt + width + head * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(QKV + offs_n[:, None] * stride_qt + 2 * width + head * HEAD_DIM + offs_d[None, :], mask=kv_mask,
                    other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + offs_m[:, None] * stride_ot + head * HEAD_DIM + offs_d[None, :], acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def causal_attention(qkv: torch.Tensor, bound: bool) -> torch.Tensor:
    """qkv (T, 3 * DIM) rows of one sequence -> attention output (T, DIM)."""
    t = qkv.shape[0]
    out = torch.empty(t, DIM, device=qkv.device, dtype=qkv.dtype)
    grid = (triton.cdiv(t, BLOCK_M), HEADS)
    causal_attn_kernel[grid](qkv, out, HEAD_DIM**-0.5, t, qkv.stride(0), out.stride(0), HEADS, HEAD_DIM=HEAD_DIM,
                             BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BOUND_AT_DIAGONAL=bound, num_warps=4, num_stages=2)
    return out


if not CUDA:  # Triton's interpreter cannot run inside a dynamo trace: on the CPU check the kernel stays eager
    causal_attention = torch.compiler.disable(causal_attention)


class Block(nn.Module):
    def __init__(self, bound: bool) -> None:
        super().__init__()
        self.bound = bound
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.proj(causal_attention(self.qkv(self.ln1(x)), self.bound))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteLM(nn.Module):
    def __init__(self, bound: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(bound) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (T,) -> mean next-byte NLL (0-d, float32)."""
        x = self.embed(ids) + self.pos[: ids.shape[0]]
        for block in self.blocks:
            x = block(x)
        logits = self.norm(x[:-1]) @ self.embed.weight.T
        return F.cross_entropy(logits.float(), ids[1:])


def main() -> None:
    args = options(__doc__, ("causal_bound", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ByteLM(bound=args.variant == "causal_bound").to(DTYPE).eval()
    scorer = torch.compile(model) if args.variant == "compiled" else model
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    # a small corpus of documents: bytes with a skewed, text-like distribution
    freqs = torch.rand(256, device=DEVICE, generator=gen) ** 4
    corpus = torch.multinomial(freqs, 4 * SEQ, replacement=True, generator=gen).view(4, SEQ)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            total += scorer(corpus[step % 4])
            timer.end()
    timer.report(f"triton_causal_full_loop variant={args.variant or 'baseline'} mean nll "
                 f"{total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
