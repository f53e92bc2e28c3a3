"""Enhancer-activity scoring with a DNA language model whose MLPs are the user's Triton matmul, its tile operands upcast to float32 before `tl.dot`.

A Nucleotide-Transformer-style encoder (6-mer tokens, 6 bidirectional pre-norm blocks of width 1,024,
16 heads, SDPA, MLPs of 4,096, bf16, inference) scores 8 sequences of 2,048 tokens (12 kb) per step.
Both MLP matmuls of every block (up with a fused bias + tanh-GELU epilogue, down with bias) are one
user `@triton.jit` kernel: 128 x 128 x 64 tiles, grouped program order (GROUP_M 8), 8 warps, 3
stages, float32 accumulator.
Baseline: the kernel loads the bf16 tiles and converts them with `.to(tl.float32)` before
`tl.dot` "to accumulate accurately": `tl.dot` on float32 operands runs as TF32 MMAs (half the bf16
tensor-core rate on Hopper) and the converted tiles must be staged in twice the shared memory:
~275 GFLOP per block through the slow path: two thirds of the Linear work, half of the step's
matmul FLOPs (attention included).
Variant `bf16_dot`: the bf16 tiles go to `tl.dot` as loaded, with the float32 accumulator
(`acc = tl.dot(a, b, acc)`, as in Triton's matmul tutorial); the same tiles, order, warps and
stages. bf16 values are exact in TF32 and both accumulate in float32.
"""

import os

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if not CUDA:  # the CPU check runs the kernel in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton
import triton.language as tl

VARIANTS = ("bf16_dot",)
SEQS, TOKENS = (8, 2048) if CUDA else (2, 64)
DIM, HEADS, LAYERS, KMERS = (1024, 16, 6, 4101) if CUDA else (64, 4, 2, 4101)
BM, BN, BK = (128, 128, 64) if CUDA else (32, 32, 32)
DTYPE = torch.bfloat16 if CUDA else torch.float32


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                  GELU: tl.constexpr, UPCAST: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """y = act(x @ w + b) for x (M, K), w (K, N) (a Linear's weight, transposed view), K % BLOCK_K == 0."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_rows
    pid_n = (pid % in_group) // group_rows
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm[:, None] * stride_xm + rk[None, :] * stride_xk
    w_ptrs = w_ptr + rk[:, None] * stride_wk + rn[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs)
        if UPCAST:
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32))
        else:
            acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if GELU:  # tanh approximation: x * sigmoid(2 * sqrt(2 / pi) * (x + 0.044715 x^3))
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def triton_linear(x: torch.Tensor, layer: nn.Linear, gelu: bool, upcast: bool) -> torch.Tensor:
    m, k = x.shape
    n = layer.out_features
    assert k % BK == 0
    w = layer.weight.t()  # (K, N) view of the (N, K) weight
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
    linear_kernel[grid](x, w, layer.bias, y, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                        y.stride(0), y.stride(1), GELU=gelu, UPCAST=upcast, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                        GROUP_M=8, num_warps=8, num_stages=3)
    return y


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, upcast: bool) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        h = triton_linear(self.n2(x).view(b * t, d), self.up, gelu=True, upcast=upcast)
        return x + triton_linear(h, self.down, gelu=False, upcast=upcast).view(b, t, d)


class EnhancerScorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(KMERS, DIM)
        self.pos = nn.Parameter(torch.randn(TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, 1)

    def forward(self, ids: torch.Tensor, upcast: bool) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        for blk in self.blocks:
            x = blk(x, upcast)
        return self.head(self.norm(x).mean(1)).squeeze(-1)


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = EnhancerScorer().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    batches = [torch.randint(0, KMERS, (SEQS, TOKENS), generator=gen, device=DEVICE) for _ in range(3)]
    upcast = args.variant is None
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            total += model(batches[i % len(batches)], upcast).float().mean()
            timer.end()
    timer.report(f"triton_enhancer_fp32_dot_operands variant={args.variant or 'baseline'} "
                 f"mean activity score {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
