"""A user Triton matmul kernel (the tutorial's tiled `tl.dot` loop) used for the projections of an
inference MLP, launched with a small-tile configuration: 16 x 16 x 16 tiles, 1 warp, 1 stage.

Run: TRITON_INTERPRET=1 (CPU only) tracekit profile --warmup 2 --active 4 benchmarks/heldout4/triton_matmul.py
Variants: --variant tuned (the same kernel at 128 x 128 x 64 tiles, 8 warps, 3 stages, grouped
program order), --variant torch (`torch.matmul`). Same weights and inputs. On the GPU: 3 layers of
8192 x 8192 bf16 weights on 8192 tokens, ReLU between them, fp32 accumulation, one call per step.
Without CUDA the kernel runs under TRITON_INTERPRET=1 at tiny sizes (the script sets it when absent).
Each step ends with tracekit.step().
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, RELU: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    per_group = GROUP * grid_n
    first_m = (pid // per_group) * GROUP
    size_m = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        y = tl.load(b, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BK * sak
        b += BK * sbk
    if RELU:
        acc = tl.maximum(acc, 0.0)
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


CONFIGS = {
    None: {"BM": 16, "BN": 16, "BK": 16, "GROUP": 1, "num_warps": 1, "num_stages": 1},
    "tuned": {"BM": 128, "BN": 128, "BK": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3},
}


def matmul(a: torch.Tensor, b: torch.Tensor, relu: bool, variant: str | None) -> torch.Tensor:
    """a (M, K) @ b (K, N), optionally ReLU'd, with the variant's kernel."""
    if variant == "torch":
        out = a @ b
        return torch.relu(out) if relu else out
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    cfg = CONFIGS[variant]
    grid = (triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"]),)
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), RELU=relu, **cfg)
    return c


def main() -> None:
    args = options(__doc__, ("tuned", "torch")).parse_args()
    dim, tokens, layers, calls = (8192, 8192, 3, 1) if CUDA else (32, 32, 3, 2)
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    weights = [(torch.randn(dim, dim) / dim**0.5).to(DEVICE, dtype) for _ in range(layers)]
    x = torch.randn(tokens, dim).to(DEVICE, dtype)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE, dtype=torch.float32)
    for _ in range(args.steps):
        timer.tick()
        for _ in range(calls):
            h = x
            for j, w in enumerate(weights):
                h = matmul(h, w, relu=j < layers - 1, variant=args.variant)
            total += h.float().square().mean()
        timer.end()
    timer.report(f"triton_matmul variant={args.variant or 'baseline'} mean output power {total.item() / args.steps / calls:.5f}")


if __name__ == "__main__":
    main()
