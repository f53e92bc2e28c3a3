"""PointNet shape-retrieval encoder (128 LiDAR scans x 4,096 points) whose shared per-point MLP is the user's own Triton kernel.

Baseline: the fused Linear + bias + ReLU kernel computes each (32 x 32) output tile as
`tl.sum(a[:, :, None] * w[None, :, :], axis=1)` over 16-wide slices of K, a broadcast multiply and a
reduction on the CUDA cores in float32, as kernels written from the element-wise tutorials do: the
524,288-row layers 64 -> 128 and 128 -> 1,024 (~146 GFLOP per call) never touch the tensor cores.
Variant `tl_dot`: the same kernel, tiles and grid with `acc += tl.dot(a, w)` (bf16 inputs, float32
accumulation: tensor cores). Inference only. Without CUDA the script sets TRITON_INTERPRET=1 itself.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options

CLOUDS, POINTS, C1, C2, C3, EMB = (128, 4096, 64, 128, 1024, 256) if CUDA else (2, 64, 16, 32, 64, 16)
BM, BN, BK = 32, 32, 16
ACT = torch.bfloat16 if CUDA else torch.float32  # the interpreter's tl.dot mishandles bf16


@triton.jit
def linear_relu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, USE_DOT: tl.constexpr):
    """y[M, N] = relu(x[M, K] @ w[K, N] + b[N]); x, w, y bf16 (float32 on the CPU check) row-major, float32 accumulation."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if USE_DOT:
            acc += tl.dot(a, w)
        else:
            acc += tl.sum(a.to(tl.float32)[:, :, None] * w.to(tl.float32)[None, :, :], axis=1)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def mlp_layer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, use_dot: bool) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[1]
    y = torch.empty(m, n, dtype=ACT, device=x.device)
    linear_relu[(triton.cdiv(m, BM), triton.cdiv(n, BN))](x, w, b, y, m, n, k, BM=BM, BN=BN, BK=BK, USE_DOT=use_dot, num_warps=4)
    return y


@torch.no_grad()
def main() -> None:
    args = options(__doc__, ("tl_dot",)).parse_args()
    use_dot = args.variant == "tl_dot"
    torch.manual_seed(0)
    gen = torch.Generator(device=DEVICE).manual_seed(20)

    def weight(k: int, n: int) -> torch.Tensor:
        return (torch.randn(k, n, generator=gen, device=DEVICE) / k ** 0.5).to(ACT)

    w1, w2, w3, w4 = weight(3, C1), weight(C1, C2), weight(C2, C3), weight(C3, EMB)
    b1, b2, b3 = (torch.randn(n, generator=gen, device=DEVICE) * 0.01 for n in (C1, C2, C3))
    scans = [torch.randn(CLOUDS * POINTS, 3, generator=gen, device=DEVICE).to(ACT) for _ in range(2)]

    def embed(pts: torch.Tensor) -> torch.Tensor:
        h = torch.relu(pts.float() @ w1.float() + b1).to(ACT)  # 3 -> 64 in torch (K = 3)
        h = mlp_layer(h, w2, b2, use_dot)
        h = mlp_layer(h, w3, b3, use_dot)
        glob = h.view(CLOUDS, POINTS, C3).amax(1)  # symmetric max pool per scan
        return torch.nn.functional.normalize((glob @ w4).float(), dim=-1)

    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        e = embed(scans[i % 2])
        total += (e @ e[0]).sum()  # similarity of every scan to the first: the retrieval score
        timer.end()
    timer.report(f"triton_pointnet_no_dot variant={args.variant or 'baseline'} similarity checksum {total.item():.4f}")


if __name__ == "__main__":
    main()
