"""How much host time bf16 autocast adds per GEMM, measured without the profiler on launch-bound steps.

    python3 benchmarks/gpu/autocast_host.py [--repeats N]

Autocast casts the float32 inputs of each GEMM-class op (input, weight, bias) to bf16, and each
float32-listed op (layer_norm, softmax, losses) back to float32: every cast is an op of its own on the
host (aten::to → _to_copy → empty_strided + copy_, one kernel launch), and in training its backward is
another (ToCopyBackward0). On a step the GPU does not hide, that host work is added to the step.

Three workloads, each with tensors small enough that the host sets the step time (batch 4, width 256):
- `block_train`: 6 pre-norm transformer blocks (LayerNorm, qkv/out Linear, SDPA, LayerNorm, MLP 4x
  with GELU), forward + backward (no optimizer): 4 Linear layers per block (qkv, o, fc1, fc2).
- `mlp_infer`: 24 Linear + GELU layers under torch.no_grad(), forward only: 24 GEMM kernels per step.
- `conv_train`: 8 Conv2d(32, 32, 3) + BatchNorm2d + ReLU on 4×32×16×16, forward + backward.

Each runs float32 and under torch.autocast("cuda", torch.bfloat16), alternating, N repeats of 200 steps
(host wall clock per step after a synchronize, no per-step sync: the GPU runs behind). Prints per
workload the float32 and autocast step, their difference, the GEMM (or conv) kernels per step counted
from one profiled step of each, and the difference per GEMM-class kernel; JSON on the last line.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

DEV = "cuda" if torch.cuda.is_available() else "cpu"
GEMM_KERNEL = ("gemm", "sgemm", "xmma", "cutlass", "nvjet", "conv", "implicit", "wgrad", "dgrad")


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


def workloads() -> dict:
    blocks = nn.Sequential(*[Block(256, 4) for _ in range(6)]).to(DEV)
    xb = torch.randn(4, 16, 256, device=DEV, requires_grad=True)
    mlp = nn.Sequential(*[m for _ in range(24) for m in (nn.Linear(256, 256), nn.GELU())]).to(DEV)
    xm = torch.randn(4, 256, device=DEV)
    conv = nn.Sequential(*[m for _ in range(8) for m in (nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())]).to(DEV)
    xc = torch.randn(4, 32, 16, 16, device=DEV, requires_grad=True)

    def block_train() -> None:
        blocks(xb).float().sum().backward()

    def mlp_infer() -> None:
        with torch.no_grad():
            mlp(xm)

    def conv_train() -> None:
        conv(xc).float().sum().backward()

    return {"block_train": block_train, "mlp_infer": mlp_infer, "conv_train": conv_train}


def step_ms(fn, autocast: bool, steps: int) -> float:
    ctx = torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast)
    for _ in range(10):
        with ctx:
            fn()
    if DEV == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        with ctx:
            fn()
    if DEV == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def counts(fn, autocast: bool) -> dict:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    with profile(activities=acts) as prof:
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
            fn()
        if DEV == "cuda":
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gemm = sum(1 for e in kernels if any(s in e.name.lower() for s in GEMM_KERNEL))
    casts = sum(1 for e in prof.events() if e.name == "aten::_to_copy")
    return {"kernels": len(kernels), "gemm_kernels": gemm, "casts": casts}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    print(torch.__version__, torch.cuda.get_device_name() if DEV == "cuda" else "cpu")
    out = {}
    for name, fn in workloads().items():
        fp32, amp = [], []
        for _ in range(args.repeats):
            fp32.append(step_ms(fn, False, args.steps))
            amp.append(step_ms(fn, True, args.steps))
        c32, c16 = counts(fn, False), counts(fn, True)
        a, b = statistics.median(fp32), statistics.median(amp)
        per = (b - a) * 1e3 / max(c32["gemm_kernels"], 1)
        added = c16["casts"] - c32["casts"]
        out[name] = {"fp32_ms": a, "autocast_ms": b, "fp32_runs": fp32, "autocast_runs": amp, "fp32": c32,
                     "autocast": c16, "added_us_per_gemm_kernel": per,
                     "added_us_per_cast": (b - a) * 1e3 / added if added > 0 else None}
        print(f"{name}: fp32 {a:.3f} ms, autocast {b:.3f} ms (+{(b - a) * 1e3:.1f} µs); GEMM-class kernels "
              f"{c32['gemm_kernels']} → {c16['gemm_kernels']}, casts {c32['casts']} → {c16['casts']}; "
              f"+{per:.2f} µs per GEMM-class kernel, "
              + (f"+{(b - a) * 1e3 / added:.2f} µs per added cast" if added > 0 else "no cast added"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
