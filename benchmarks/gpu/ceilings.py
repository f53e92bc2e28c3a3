"""Measured ceilings for the roofline table: device-to-device copy bandwidth and large GEMM TFLOP/s.

  python3 benchmarks/gpu/ceilings.py OUT.json
Copy: 2 GiB fp32 buffer, `dst.copy_(src)`, bytes = read + write. GEMMs: 8192^3 on random normal data
(never zeros), bf16, fp16, fp32 with TF32 off and fp32 with TF32 on; FLOPs = 2*M*N*K. Median of 10
event-timed runs after 3 warm-ups, each configuration measured twice (two lines) to show the spread.
"""

from __future__ import annotations

import json
import sys

import torch
from timing import event_ms


def copy_gbps() -> float:
    src = torch.randn(1 << 29, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    ms = event_ms(lambda: dst.copy_(src), iters=20)
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def add_gbps() -> float:
    x, y = torch.randn(1 << 28, device="cuda"), torch.randn(1 << 28, device="cuda")  # 1 GiB each
    out = torch.empty_like(x)
    ms = event_ms(lambda: torch.add(x, y, out=out), iters=20)
    return 3 * x.numel() * 4 / (ms * 1e-3) / 1e9


def gemm_tflops(dtype: torch.dtype, tf32: bool, n: int = 8192) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    out = torch.empty(n, n, device="cuda", dtype=dtype)
    ms = event_ms(lambda: torch.mm(a, b, out=out), iters=10)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n**3 / (ms * 1e-3) / 1e12


def main() -> None:
    res: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, fn in [
        ("copy_d2d_GBps", copy_gbps),
        ("add_fp32_GBps", add_gbps),
        ("gemm_bf16_8192_TFLOPs", lambda: gemm_tflops(torch.bfloat16, False)),
        ("gemm_fp16_8192_TFLOPs", lambda: gemm_tflops(torch.float16, False)),
        ("gemm_fp32_tf32_off_8192_TFLOPs", lambda: gemm_tflops(torch.float32, False)),
        ("gemm_tf32_8192_TFLOPs", lambda: gemm_tflops(torch.float32, True)),
    ]:
        res[name] = [round(fn(), 1), round(fn(), 1)]
        print(f"{name:34s} {res[name]}", flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
