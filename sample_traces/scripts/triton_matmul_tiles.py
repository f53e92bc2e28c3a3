"""The Triton tutorial matmul (03-matrix-multiplication: grouped program order, K masks) on a large
problem, M=N=K=4096 in fp16 with fp32 accumulation, one launch per step, with the tile shape, warps
and stages given on the command line.

Run: tracekit profile --warmup 1 --active 6 sample_traces/scripts/triton_matmul_tiles.py
     tracekit profile --warmup 1 --active 6 sample_traces/scripts/triton_matmul_tiles.py --tiles 128,128,32 --warps 4 --stages 4
The pair of the triton_config rule: the default 16x16x16 tiles (Triton's default 4 warps and 3
stages) give a 65,536-program grid of tiny tiles; 128x128x32 with 4 warps and 4 stages is one of the
tutorial's autotune configs for fp16 on CUDA. Without CUDA it runs a tiny size under Triton's
interpreter (TRITON_INTERPRET=1).
"""

import argparse
import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import triton
import triton.language as tl

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, tiles: tuple[int, int, int],
           warps: int, stages: int) -> torch.Tensor:
    """c = a @ b with one program per BLOCK_SIZE_M x BLOCK_SIZE_N output tile (a 1-D grid)."""
    M, K = a.shape
    _, N = b.shape
    bm, bn, bk = tiles
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8,
        num_warps=warps, num_stages=stages,
    )
    return c


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tiles", default="16,16,16", help="BLOCK_SIZE_M,BLOCK_SIZE_N,BLOCK_SIZE_K")
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    bm, bn, bk = (int(t) for t in args.tiles.split(","))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 4096 if device == "cuda" else 64
    if device == "cpu":
        bm, bn, bk = min(bm, 32), min(bn, 32), min(bk, 32)
    torch.manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    c = torch.empty(n, n, device=device, dtype=torch.float16)
    matmul(a, b, c, (bm, bn, bk), args.warps, args.stages)  # warm-up: compiles the kernel
    ref = a.float() @ b.float()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, f"matmul_kernel relative error {err}"
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    times = []
    for _ in range(args.steps):
        times.append(time.perf_counter())
        matmul(a, b, c, (bm, bn, bk), args.warps, args.stages)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    flops = 2.0 * n * n * n
    print(f"tiles {bm}x{bn}x{bk}, {args.warps} warps, {args.stages} stages: mean step time over steps "
          f"2..{args.steps - 1}: {per * 1e3:.3f} ms ({flops / per / 1e12:.1f} TFLOP/s)")


if __name__ == "__main__":
    main()
