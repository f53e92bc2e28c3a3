"""The seed's tiled Triton matmul (`matmul_kernel`), M=N=K=2048 in fp16 with fp32 accumulation.

Run: tracekit profile sample_traces/scripts/triton_matmul.py -o sample_traces/triton_matmul.trace.json.gz
The seed's kernel has no bounds masks, so M, N and K must be multiples of the block sizes.
On a machine without CUDA it runs a tiny size under Triton's interpreter (TRITON_INTERPRET=1).
"""

import os

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
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    for k in range(0, K, BLOCK_K):  # noqa: B007  (the seed's kernel, verbatim)
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, accumulator)


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, block: int = 128) -> torch.Tensor:
    """c = a @ b with one program per block x block output tile."""
    M, K = a.shape
    _, N = b.shape
    grid = (M // block, N // block)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=64 if block >= 64 else block,
        num_warps=8 if block >= 128 else 4, num_stages=3,
    )
    return c


def build(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    n, block = (2048, 128) if device == "cuda" else (64, 32)
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    return a, b, torch.empty(n, n, device=device, dtype=torch.float16), block


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b, c, block = build(device)
    matmul(a, b, c, block)  # warm-up: compiles the kernel
    ref = (a.float() @ b.float()).half()
    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err < 1e-2, f"matmul_kernel relative error {err}"
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(10):
        matmul(a, b, c, block)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
