"""Fixture: a Triton vector add and a tl.dot matmul, run with TRITON_INTERPRET=1 on the CPU."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, OUT_DTYPE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (x * scale).to(OUT_DTYPE), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=256)
    return out


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=torch.float32)
    grid = (M // 16, N // 32)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=2, num_stages=1,
    )
    return c


def scale(x, factor):
    out = torch.empty(x.shape, dtype=torch.float32)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](
        x, out, x.numel(), factor, BLOCK=64, OUT_DTYPE=tl.float32
    )
    return out


if __name__ == "__main__":
    launches = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.manual_seed(0)
    x = torch.randn(1000)
    y = torch.randn(1000)
    a = torch.randn(32, 48)
    b = torch.randn(64, 48).t()  # a transposed view: strides (1, 48)
    for _ in range(launches):
        assert torch.allclose(add(x, y), x + y)
        assert torch.allclose(matmul(a, b), a @ b, atol=1e-4)
        assert torch.allclose(scale(x.half(), 0.5), (x.half() * 0.5).float())
    print("triton kernels ok", flush=True)
