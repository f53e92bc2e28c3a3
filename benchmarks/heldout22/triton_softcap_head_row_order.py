"""LM evaluation whose Triton soft-capped vocabulary head walks its output tiles row by row (user Triton kernel).

Workload: perplexity evaluation of a small Gemma-style LM (token embedding, 2 pre-norm causal blocks of
width 2,048 with 16 heads, final LayerNorm, bf16 weights) on 8 sequences of 1,024 tokens per step,
over a 65,536-token vocabulary. The vocabulary head is the user's own Triton matmul with the final
logit soft-capping fused into its epilogue (`30 * tanh(logits / 30)`, written with `tl.sigmoid`), so the
(8,192 x 65,536) logits are written once, in bf16; then cross-entropy on the next tokens.

Cause (baseline): the kernel maps its 1-D program id to output tiles in plain row-major order
(`pid_m = pid // num_pid_n`, `pid_n = pid % num_pid_n`), with 64 x 128 tiles: one row of tiles is 512
programs, about as many as run at once, so the programs in flight share one 64-row strip of the hidden
states and each needs a different 128-row strip of the 256 MB head weight. That weight does not fit in
the 50 MB L2 and is streamed from HBM again for each of the 128 row strips, ~32 GB per call for a
~2.2 TFLOP product: the kernel is bound by memory bandwidth instead of tensor-core throughput.

Fix (`--variant grouped_order`): the "L2 cache optimization" of Triton's matmul tutorial: programs are
grouped `GROUP_M = 8` row strips at a time and walk down a column within the group, so the tiles in
flight reuse 8 strips of hidden states and a few dozen strips of weight from L2, and the weight is read
from HBM about 8x less. The same kernel, tiles, K loop, warps and stages: each output tile is computed
by the same instructions in the same order, so the logits and the loss are identical.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU check runs the kernel in Triton's interpreter

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, AttnBlock, StepTimer, options
from torch import nn

VARIANTS = ("grouped_order",)
DIM, HEADS, LAYERS, BATCH, SEQ, VOCAB = (2048, 16, 2, 8, 1024, 65536) if CUDA else (64, 4, 1, 2, 32, 512)
BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = (64, 128, 32, 8) if CUDA else (16, 32, 16, 8)
WARPS, STAGES = 4, 4
CAP = 30.0
# bf16 on the GPU; the interpreter's tl.dot is checked in float32
DTYPE = torch.bfloat16 if CUDA else torch.float32


@triton.jit
def softcap_head_kernel(h_ptr, w_ptr, out_ptr, M, N, K,
                        stride_hm, stride_hk, stride_wn, stride_wk, stride_om, stride_on,
                        CAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, GROUPED: tl.constexpr):
    """out[m, n] = CAP * tanh((h @ w.T)[m, n] / CAP) for one BLOCK_M x BLOCK_N tile (w: (N, K), as nn.Linear)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if GROUPED:
        num_pid_in_group = GROUP_M * num_pid_n
        first_pid_m = (pid // num_pid_in_group) * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
    else:
        pid_m = pid // num_pid_n
        pid_n = pid % num_pid_n
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_k[None, :] * stride_hk
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(h_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        h_ptrs += BLOCK_K * stride_hk
        w_ptrs += BLOCK_K * stride_wk
    capped = CAP * (2.0 * tl.sigmoid(acc * (2.0 / CAP)) - 1.0)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    out_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, capped.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def softcap_head(h: torch.Tensor, w: torch.Tensor, grouped: bool) -> torch.Tensor:
    m, k = h.shape
    n = w.shape[0]
    out = torch.empty(m, n, device=h.device, dtype=h.dtype)
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    softcap_head_kernel[grid](h, w, out, m, n, k, h.stride(0), h.stride(1), w.stride(0), w.stride(1),
                              out.stride(0), out.stride(1), CAP=CAP, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                              BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, GROUPED=grouped, num_warps=WARPS, num_stages=STAGES)
    return out


class SmallLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)  # its weight is read by the Triton kernel

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * DIM**0.5
        for block in self.blocks:
            x = block(x, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.norm(x)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    grouped = args.variant == "grouped_order"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SmallLM().to(DTYPE).eval()
    corpus = torch.randint(0, VOCAB, (4 * BATCH, SEQ + 1), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(1))
    nll = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            rows = corpus[(i % 4) * BATCH:(i % 4 + 1) * BATCH]
            h = model.hidden(rows[:, :-1]).reshape(-1, DIM)
            logits = softcap_head(h, model.head.weight, grouped)
            nll += F.cross_entropy(logits, rows[:, 1:].reshape(-1), reduction="none").double().sum()
            timer.end()
    tokens = args.steps * BATCH * SEQ
    timer.report(f"triton_softcap_head_row_order variant={args.variant or 'baseline'} "
                 f"mean nll {nll.item() / tokens:.5f}")


if __name__ == "__main__":
    main()
