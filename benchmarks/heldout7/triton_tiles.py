"""Inference MLP whose two Linear + bias + ReLU layers are one user Triton matmul kernel, launched with 16 x 16 x 16 tiles.

The kernel is the Triton tutorial's blocked matmul (grouped program order, fp32 accumulator, `tl.dot`)
with a bias + ReLU epilogue; the layers are 4096 -> 4096 -> 4096 on 16,384 bf16 tokens, 2 calls
of the two-layer MLP per step. Baseline: BLOCK_M = BLOCK_N = BLOCK_K = 16, 1 warp, 1 stage: a grid of
262,144 programs per call, each a 16 x 16 output tile that streams its A row panel and B column panel
16 columns at a time. Variant `big_tiles`: the same kernel at 128 x 128 x 64 tiles, 8 warps, 3
stages, GROUP_M 8 (the tutorial's configuration for large bf16 GEMMs on sm80+).
"""

import os

import torch

if not torch.cuda.is_available():  # the CPU check runs the kernel in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options


@triton.jit
def linear_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = relu(A @ B + bias), A (M, K), B (K, N), fp32 accumulation, output in C's dtype."""
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % size_m)
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    out = tl.maximum(acc + bias[None, :], 0.0)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
TINY = (16, 16, 16, 1, 1, 1)
TUTORIAL = (128, 128, 64, 8, 8, 3)


def linear_relu(a: torch.Tensor, w_t: torch.Tensor, bias: torch.Tensor, config: tuple[int, ...]) -> torch.Tensor:
    """relu(a @ w_t + bias) with w_t stored (K, N)."""
    m, k = a.shape
    n = w_t.shape[1]
    bm, bn, bk, gm, warps, stages = config
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    linear_relu_kernel[grid](a, w_t, bias, c, m, n, k, a.stride(0), a.stride(1), w_t.stride(0), w_t.stride(1),
                             c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm,
                             num_warps=warps, num_stages=stages)
    return c


def main() -> None:
    args = options(__doc__, ("big_tiles",)).parse_args()
    tokens, dim, calls = (16384, 4096, 2) if CUDA else (96, 80, 2)
    dtype = torch.bfloat16 if CUDA else torch.float32
    config = TUTORIAL if args.variant == "big_tiles" else TINY
    if not CUDA:  # interpreter: the same kernel with tiles that fit the tiny shapes
        config = (32, 32, 32, 2, 4, 1) if args.variant == "big_tiles" else TINY
    torch.manual_seed(0)
    with torch.device(DEVICE):
        w1, w2 = (torch.randn(dim, dim) / dim**0.5 for _ in range(2))
        b1, b2 = torch.randn(dim) * 0.1, torch.randn(dim) * 0.1
        xs = torch.randn(calls, tokens, dim)
    w1, w2, b1, b2, xs = (t.to(dtype) for t in (w1, w2, b1, b2, xs))
    checksum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        for c in range(calls):
            y = linear_relu(linear_relu(xs[c], w1, b1, config), w2, b2, config)
            checksum += y.float().mean()
        timer.end()
    timer.report(f"triton_tiles variant={args.variant or 'baseline'} output checksum {checksum.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
