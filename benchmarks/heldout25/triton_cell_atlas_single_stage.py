"""Single-cell atlas embedding through a user Triton GEMM launched with `num_stages=1`: no software pipelining.

Embedding and reconstructing a single-cell RNA-seq atlas with an scVI-style autoencoder, inference:
16,384 cells per step, 16,384 log-normalised gene counts each; encoder 16,384 -> 2,048 -> 512 ->
latent 128, decoder 128 -> 512 -> 2,048 -> 16,384 (ReLU between layers, bf16). Every layer is the
user's `@triton.jit` kernel (Triton's matmul tutorial: 128 x 128 x 64 tiles, grouped tile order, 8
warps, bf16 `tl.dot` with a float32 accumulator, fused bias and ReLU); the two wide layers carry
~2.2 TFLOP per step, 97 % of the work. The step ends with the reconstruction error.

Baseline: the kernel is launched with `num_stages=1` (a setting kept from a port: it avoids
"out of resource: shared memory" on small GPUs and is what some AMD guides suggest). With one stage
the compiler does not pipeline the K loop: every iteration waits for its A and B tiles to arrive from
HBM before the MMAs run, and only the other resident programs hide that latency.

Variant `pipelined_stages`: `num_stages=3` (the tutorial's value for this tile): the loads of the
next two K tiles are issued while the current one is multiplied (96 KB of shared memory per
program). The same tiles, order, warps and arithmetic.
"""

import itertools
import os

import torch

from _common import CUDA, DEVICE, StepTimer, options  # isort: skip

if not CUDA:  # the CPU check runs the kernel in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

NAME = "triton_cell_atlas_single_stage"
VARIANTS = ("pipelined_stages",)

if CUDA:
    CELLS, GENES, WIDTHS = 16384, 16384, (2048, 512, 128)
    BM, BN, BK, WARPS = 128, 128, 64, 8
else:  # tiny check of the script on the CPU
    CELLS, GENES, WIDTHS = 64, 256, (128, 64, 32)
    BM, BN, BK, WARPS = 32, 32, 32, 4
GROUP_M, POOL = 8, 2


@triton.jit
def linear_kernel(a_ptr, w_ptr, bias_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_wk, stride_wn, stride_cm, stride_cn,
                  RELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP: tl.constexpr):
    """C = act(A @ W + bias), A (M, K), W (K, N); grouped tile order, float32 accumulator."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP * num_n
    first_m = (pid // per_group) * GROUP
    group_size = min(num_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk
    acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool, stages: int) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[1]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
    linear_kernel[grid](x, w, b, out, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                        out.stride(0), out.stride(1), RELU=relu, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                        GROUP=GROUP_M, num_warps=WARPS, num_stages=stages)
    return out


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    stages = 3 if args.variant == "pipelined_stages" else 1
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    dims = [GENES, *WIDTHS, *reversed(WIDTHS[:-1]), GENES]
    layers = []
    for fan_in, fan_out in itertools.pairwise(dims):
        w = (torch.randn(fan_in, fan_out, device=DEVICE) * (2.0 / fan_in) ** 0.5).to(dtype)
        layers.append((w, (torch.randn(fan_out, device=DEVICE) * 0.01).to(dtype)))

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    counts = torch.log1p(torch.rand(POOL, CELLS, GENES, generator=gen, device=DEVICE) * 4).to(dtype)

    err = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        x = counts[i % POOL]
        h = x
        for j, (w, b) in enumerate(layers):
            h = linear(h, w, b, relu=j < len(layers) - 1, stages=stages)
        err += (torch.linalg.vector_norm(h - x, dtype=torch.float32) ** 2 / h.numel()).double()
        timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} reconstruction mse {err.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
