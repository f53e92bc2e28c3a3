"""What weight-only int8 GEMV paths this torch build offers on CUDA, and their unprofiled time at batch 1.

Run: OUT=/tmp/probe python3 sample_traces/scripts/probe_int8.py     (writes $OUT/int8_probe.txt)
One 8192 × 8192 weight, x of shape (1, 8192) bf16; each path timed with CUDA events over 200 calls
after 20 warm-up calls: bf16 F.linear, torch.compile'd int8 dequant-GEMV (decode_gemv.py --int8),
torch._weight_int8pack_mm, torch._int_mm (int8 × int8, needs M > 16 on CUDA: tried at M = 32), and
whether torchao / bitsandbytes import.
"""

import importlib.util
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_gemv import gemv_int8, int8_rows


def timed(fn, n: int = 200) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3  # µs per call


def main() -> None:
    lines = [f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name()}"]
    dim = 8192
    torch.manual_seed(0)
    w = torch.randn(dim, dim, device="cuda", dtype=torch.bfloat16) / dim**0.5
    x = torch.randn(1, dim, device="cuda", dtype=torch.bfloat16)
    q, s = int8_rows(w)
    ref = torch.nn.functional.linear(x, w)
    paths = {
        "bf16 F.linear": lambda: torch.nn.functional.linear(x, w),
        "int8 compiled dequant-GEMV": (lambda f: lambda: f(x, q, s))(torch.compile(gemv_int8, fullgraph=True)),
        "torch._weight_int8pack_mm": lambda: torch._weight_int8pack_mm(x, q, s.squeeze(-1)),
    }
    xq = torch.randint(-127, 127, (32, dim), device="cuda", dtype=torch.int8)
    paths["torch._int_mm (M=32, int8 activations too)"] = lambda: torch._int_mm(xq, q.t())
    for name, fn in paths.items():
        try:
            out = fn()
            err = ""
            if out.shape == ref.shape:
                err = f", rel err {((out.float() - ref.float()).norm() / ref.float().norm()).item():.4f}"
            us = timed(fn)
            gbps = (q.numel() * (2 if name.startswith("bf16") else 1)) / (us * 1e-6) / 1e9
            lines.append(f"{name}: {us:.2f} us per call, {gbps:.0f} GB/s of weight bytes{err}")
        except Exception as e:
            lines.append(f"{name}: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    for mod in ("torchao", "bitsandbytes", "vllm"):
        lines.append(f"{mod} importable: {importlib.util.find_spec(mod) is not None}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "int8_probe.txt"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
