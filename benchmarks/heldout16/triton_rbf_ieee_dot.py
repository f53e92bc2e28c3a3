"""Deep-kernel GP inference whose fused Triton RBF kernel-matrix product runs `tl.dot` at IEEE precision.

Workload: posterior inference with a trained deep-kernel Gaussian process (Wilson et al.'s deep
kernel learning; KeOps / GPyTorch-style matrix-free kernel products): a frozen float32 MLP feature
extractor (32 -> 256 -> 128, ReLU) maps 16,384 training and 2,048 test inputs to 128-d features,
and each step solves (K + s2 I) A = [y, 15 Rademacher probes] by 8 batched conjugate-gradient
iterations, then predicts the test means K(X*, X) A[:, 0]. Every product with K is a user Triton
kernel that never materialises the 16,384 x 16,384 kernel matrix: per (64-row, 64-column) tile it
computes x_i . x_j with `tl.dot`, the squared distances |x_i|^2 + |x_j|^2 - 2 x_i . x_j, the RBF
values exp(-d^2 / 2), and accumulates their product with the right-hand sides with a second
`tl.dot` (flash-attention's structure without the softmax). The kernel's author wanted float32
accuracy for the distances (tf32's 10-bit mantissa loses them to cancellation for nearby points)
and wrote both products as `tl.dot(..., input_precision="ieee")`: on an H100 that takes Triton's
FMA path on the CUDA cores (~67 TFLOP/s peak for all of the work) instead of the tensor cores:
~77 GFLOP per kernel product, 9 products a step.

Variant `tf32x3`: the same kernel with `input_precision="tf32x3"`: each float32 product split into
three TF32 tensor-core products (the big / small halves of both operands), which keeps float32-level
accuracy (Triton's documented option for that) at tensor-core speed. The same CG iterates and
predictions up to float32 rounding.

No extra variant (the cost is inside the user kernel).

Without CUDA the kernel runs in Triton's interpreter (`TRITON_INTERPRET=1`) at tiny sizes, where
both precisions compute the same float32 products.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import math

import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    N_TRAIN, N_TEST, IN, FEAT, HIDDEN, RHS, CG_ITERS, BLOCK_M, BLOCK_N, BLOCK_D = 16384, 2048, 32, 128, 256, 16, 8, 64, 64, 32
else:
    N_TRAIN, N_TEST, IN, FEAT, HIDDEN, RHS, CG_ITERS, BLOCK_M, BLOCK_N, BLOCK_D = 80, 24, 8, 32, 16, 16, 8, 16, 16, 16
NOISE, OUTPUTSCALE = 0.1, 1.0


@triton.jit
def rbf_matmul_kernel(XR, XC, SQR, SQC, P, OUT, n_rows, n_cols, outputscale,
                      FEAT: tl.constexpr, RHS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    """OUT[rows] = outputscale * exp(-|xr - xc|^2 / 2) @ P for one block of BLOCK_M rows; the features
    XR (n_rows, FEAT), XC (n_cols, FEAT) are already divided by the lengthscale, SQR / SQC their squared norms."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    offs_d = tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, RHS)
    sq_r = tl.load(SQR + rows, mask=row_ok, other=0.0)
    acc = tl.zeros((BLOCK_M, RHS), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        dot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for d in range(0, FEAT, BLOCK_D):
            a = tl.load(XR + rows[:, None] * FEAT + d + offs_d[None, :], mask=row_ok[:, None], other=0.0)
            b = tl.load(XC + cols[None, :] * FEAT + d + offs_d[:, None], mask=col_ok[None, :], other=0.0)
            dot = tl.dot(a, b, dot, input_precision=PRECISION)
        sq_c = tl.load(SQC + cols, mask=col_ok, other=0.0)
        d2 = tl.maximum(sq_r[:, None] + sq_c[None, :] - 2.0 * dot, 0.0)
        k = tl.where(col_ok[None, :], tl.exp(-0.5 * d2), 0.0)
        p = tl.load(P + cols[:, None] * RHS + offs_r[None, :], mask=col_ok[:, None], other=0.0)
        acc = tl.dot(k, p, acc, input_precision=PRECISION)
    tl.store(OUT + rows[:, None] * RHS + offs_r[None, :], acc * outputscale, mask=row_ok[:, None])


def rbf_matmul(xr: torch.Tensor, sqr: torch.Tensor, xc: torch.Tensor, sqc: torch.Tensor, p: torch.Tensor,
               precision: str) -> torch.Tensor:
    out = torch.empty(xr.shape[0], RHS, device=xr.device, dtype=torch.float32)
    rbf_matmul_kernel[(triton.cdiv(xr.shape[0], BLOCK_M),)](
        xr, xc, sqr, sqc, p, out, xr.shape[0], xc.shape[0], OUTPUTSCALE,
        FEAT=FEAT, RHS=RHS, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, PRECISION=precision,
        num_warps=4)
    return out


def main() -> None:
    args = options(__doc__, ("tf32x3",)).parse_args()
    precision = "tf32x3" if args.variant == "tf32x3" else "ieee"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        features = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, FEAT)).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x_train = torch.randn(N_TRAIN, IN, device=DEVICE, generator=gen)
    x_test = torch.randn(N_TEST, IN, device=DEVICE, generator=gen)
    with torch.no_grad():
        z = features(torch.cat([x_train, x_test]))
        z = (z - z.mean(0)) / z.std(0) / math.sqrt(FEAT / 2)  # standardised, divided by the lengthscale
    z_train, z_test = z[:N_TRAIN].contiguous(), z[N_TRAIN:].contiguous()
    sq_train, sq_test = z_train.pow(2).sum(-1), z_test.pow(2).sum(-1)
    y = torch.sin(3.0 * x_train[:, :1]) + 0.1 * torch.randn(N_TRAIN, 1, device=DEVICE, generator=gen)
    probes = torch.randint(0, 2, (N_TRAIN, RHS - 1), device=DEVICE, generator=gen).float() * 2 - 1
    rhs = torch.cat([y, probes], 1).contiguous()

    residual = torch.zeros((), device=DEVICE, dtype=torch.float64)
    mean_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            sol = torch.zeros_like(rhs)  # batched CG on (K + s2 I) sol = rhs, one column per right-hand side
            r = rhs.clone()
            p = r.clone()
            rs = (r * r).sum(0)
            for _ in range(CG_ITERS):
                ap = rbf_matmul(z_train, sq_train, z_train, sq_train, p, precision) + NOISE * p
                alpha = rs / (p * ap).sum(0)
                sol += alpha * p
                r -= alpha * ap
                rs_new = (r * r).sum(0)
                p = r + (rs_new / rs) * p
                rs = rs_new
            pred = rbf_matmul(z_test, sq_test, z_train, sq_train, sol.contiguous(), precision)[:, 0]
            residual += rs.sqrt().sum().double()
            mean_sum += pred.double().sum()
            timer.end()
    timer.report(f"triton_rbf_ieee_dot variant={args.variant or 'baseline'} mean CG residual "
                 f"{residual.item() / args.steps:.6f} predictive mean sum {mean_sum.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
