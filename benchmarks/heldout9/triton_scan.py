"""Inference with a Hawk/RG-LRU-style gated linear recurrence whose user Triton scan kernel gives each program one (sequence, channel) scalar.

Baseline: a recurrent sequence classifier (3 residual layers of width 1024: RMSNorm, one Linear
1024 -> 3072 giving the input u, the decay logits r and an output gate, a = sigmoid(r),
h_t = a_t * h_{t-1} + (1 - a_t) * u_t along the sequence, y = h * silu(gate), Linear 1024 -> 1024;
mean pool, 10 classes), bf16, inference mode, 32 sequences of 1,024 steps per call. The recurrence
is a user Triton kernel written the direct way: grid = batch x channels (32,768 programs, 4 warps
each), each program loads one bf16 scalar of a and of b per time step (float32 state), so every
warp carries a single useful lane and the programs wait in ~16 waves for their serial loops.
Variant `channel_block`: the same recurrence with each program owning 64 adjacent channels of one
sequence (vector loads and stores of 128 bytes, 1 warp, 512 programs, one wave).
On the CPU the script sets TRITON_INTERPRET=1 itself and runs tiny sizes in float32.
"""

import os
import runpy
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # the CPU check runs the kernels in Triton's interpreter

import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer"))


@triton.jit
def scan_scalar_kernel(a_ptr, b_ptr, y_ptr, T, D):
    """One program per (sequence, channel): y_t = a_t * y_{t-1} + b_t, one scalar per time step."""
    pid = tl.program_id(0)
    seq = pid // D
    ch = pid % D
    base = seq * T * D + ch
    h = tl.full([], 0.0, tl.float32)
    for t in range(T):
        off = base + t * D
        a = tl.load(a_ptr + off).to(tl.float32)
        b = tl.load(b_ptr + off).to(tl.float32)
        h = a * h + b
        tl.store(y_ptr + off, h.to(y_ptr.dtype.element_ty))


@triton.jit
def scan_block_kernel(a_ptr, b_ptr, y_ptr, T, D, BLOCK_D: tl.constexpr):
    """One program per (sequence, BLOCK_D adjacent channels): the same recurrence on a vector."""
    seq = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    base = seq * T * D + cols
    h = tl.zeros([BLOCK_D], dtype=tl.float32)
    for t in range(T):
        off = base + t * D
        a = tl.load(a_ptr + off, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + off, mask=mask, other=0.0).to(tl.float32)
        h = a * h + b
        tl.store(y_ptr + off, h.to(y_ptr.dtype.element_ty), mask=mask)


def scan(a: torch.Tensor, b: torch.Tensor, blocked: bool) -> torch.Tensor:
    bsz, t, d = a.shape
    y = torch.empty_like(a)
    if blocked:
        scan_block_kernel[(bsz, triton.cdiv(d, 64))](a, b, y, t, d, BLOCK_D=64, num_warps=1)
    else:
        scan_scalar_kernel[(bsz * d,)](a, b, y, t, d, num_warps=4)
    return y


class RecurrentLayer(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.inp = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, blocked: bool) -> torch.Tensor:
        u, r, gate = self.inp(self.norm(x)).chunk(3, dim=-1)
        a = torch.sigmoid(r)
        h = scan(a, (1 - a) * u, blocked)
        return x + self.out(h * F.silu(gate))


def main() -> None:
    args = options(__doc__, ("channel_block",)).parse_args()
    torch.manual_seed(0)
    # GPU: 32 x 1,024 steps, width 1024, 3 layers, bf16; CPU check: 2 x 16 steps, width 8, float32
    batch, steps_t, dim, layers = (32, 1024, 1024, 3) if CUDA else (2, 16, 8, 2)
    dtype = torch.bfloat16 if CUDA else torch.float32
    embed = nn.Linear(64, dim).to(DEVICE, dtype)
    body = nn.ModuleList(RecurrentLayer(dim) for _ in range(layers)).to(DEVICE, dtype)
    norm, head = nn.RMSNorm(dim).to(DEVICE, dtype), nn.Linear(dim, 10).to(DEVICE, dtype)
    g = torch.Generator(device=DEVICE).manual_seed(1)
    inputs = [torch.randn(batch, steps_t, 64, device=DEVICE, generator=g).to(dtype) for _ in range(2)]
    blocked = args.variant == "channel_block"

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            x = embed(inputs[i % 2])
            for layer in body:
                x = layer(x, blocked)
            logits = head(norm(x).mean(1))
            total += logits.float().abs().sum()
            timer.end()
    timer.report(f"triton_scan variant={args.variant or 'baseline'} logit checksum {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
