"""Dense passage retrieval scoring (4,096 queries x 8,192 candidate passages per batch, 32 batches per step) with
the user's own Triton softmax over each query's scores written as three kernels, one pass each: row max, row sum
of exp, then normalise: the (4,096 x 8,192) float32 score matrix is read three times and the probabilities
written once, where one fused kernel reads it once."""

import os

if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU check runs the kernels in Triton's interpreter

import torch
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options

VARIANT = "fused_softmax"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# queries per batch, candidate passages, embedding width, batches per step
Q, P, D, NB = (4096, 8192, 256, 32) if CUDA else (16, 64, 32, 2)
TEMP = 0.05
BLOCK = triton.next_power_of_2(P)
WARPS = 16 if CUDA else 4


@triton.jit
def row_max(x_ptr, m_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    tl.store(m_ptr + row, tl.max(x, axis=0))


@triton.jit
def row_sumexp(x_ptr, m_ptr, s_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    m = tl.load(m_ptr + row)
    tl.store(s_ptr + row, tl.sum(tl.exp(x - m), axis=0))


@triton.jit
def row_normalise(x_ptr, m_ptr, s_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    m = tl.load(m_ptr + row)
    s = tl.load(s_ptr + row)
    tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / s, mask=cols < n)


@triton.jit
def row_softmax(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / s, mask=cols < n)


def softmax_three_pass(x: torch.Tensor, y: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> None:
    grid = (x.shape[0],)
    row_max[grid](x, m, x.shape[1], x.stride(0), BLOCK=BLOCK, num_warps=WARPS)
    row_sumexp[grid](x, m, s, x.shape[1], x.stride(0), BLOCK=BLOCK, num_warps=WARPS)
    row_normalise[grid](x, m, s, y, x.shape[1], x.stride(0), BLOCK=BLOCK, num_warps=WARPS)


def softmax_fused(x: torch.Tensor, y: torch.Tensor) -> None:
    row_softmax[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=BLOCK, num_warps=WARPS)


torch.backends.cuda.matmul.allow_tf32 = True  # both variants: TF32 scores GEMM
with torch.device(DEVICE):
    gen = torch.Generator(DEVICE).manual_seed(1)
    passages = torch.nn.functional.normalize(torch.randn(P, D, generator=gen), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(NB, Q, D, generator=gen), dim=2)
    scores = torch.empty(Q, P)
    probs = torch.empty(Q, P)
    row_m, row_s = torch.empty(Q), torch.empty(Q)
keys_t = (passages / TEMP).t()

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for _ in range(args.steps):
    timer.tick()
    for b in range(NB):
        torch.mm(queries[b], keys_t, out=scores)
        if args.variant == VARIANT:
            softmax_fused(scores, probs)
        else:
            softmax_three_pass(scores, probs, row_m, row_s)
        total += probs[:, :16].sum()  # the first candidates' mass (the reranker's shortlist)
    timer.end()
timer.report(f"triton_retrieval_softmax_passes variant={args.variant or 'baseline'} shortlist mass {total.item():.6f}")
