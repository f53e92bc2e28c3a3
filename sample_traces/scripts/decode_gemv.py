"""A decode loop at batch 1 through a stack of large bf16 Linear layers: each token is 16 GEMVs that
read 128 MiB of weights apiece, so the step sits at the memory roof (weight bytes dominate).

Run: tracekit profile --warmup 1 sample_traces/scripts/decode_gemv.py             (bf16 weights)
     tracekit profile --warmup 1 sample_traces/scripts/decode_gemv.py --int8      (weight-only int8)
The pair of the quantize_weights rule: 16 layers of 8192 × 8192 (no bias), one token per step
(tracekit.step() after each), 24 tokens. --int8 stores each weight as int8 with one bf16 scale per
output row (torchao's int8_weight_only scheme) and runs the GEMV as torch.compile'd
`(w.to(bf16) * x).sum(-1) * scale`, the form torchao hands inductor at batch 1: one Triton reduction
per layer that reads the int8 weight once (half the bytes). `--int8 pack` uses
torch._weight_int8pack_mm instead, where this torch build has it for CUDA. Without CUDA it runs tiny
sizes on the CPU (a quick check of the script).
"""

import argparse
import time

import torch

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-row int8 weights and their bf16 scales (out, 1)."""
    scale = w.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
    q = torch.round(w.float() / scale).clamp(-127, 127).to(torch.int8)
    return q, scale.to(torch.bfloat16)


def gemv_int8(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (1, in) bf16 · int8 weight (out, in) → (1, out): the reduction inductor fuses with the cast."""
    return ((q.to(x.dtype) * x).sum(dim=-1) * scale.squeeze(-1)).unsqueeze(0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--int8", nargs="?", const="compile", choices=("compile", "pack"), default=None,
                   help="weight-only int8: compiled dequant-GEMV (default) or torch._weight_int8pack_mm")
    p.add_argument("--tokens", type=int, default=24)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dim, layers = (8192, 16) if cuda else (256, 2)
    torch.manual_seed(0)
    weights = [torch.randn(dim, dim, device=device, dtype=torch.bfloat16) / dim**0.5 for _ in range(layers)]
    x0 = torch.randn(1, dim, device=device, dtype=torch.bfloat16)
    if args.int8 is None:
        def layer(h: torch.Tensor, i: int) -> torch.Tensor:
            return torch.nn.functional.linear(h, weights[i])
    else:
        packed = [int8_rows(w) for w in weights]
        ref = torch.nn.functional.linear(x0, weights[0])
        del weights
        if args.int8 == "pack":
            def layer(h: torch.Tensor, i: int) -> torch.Tensor:
                q, s = packed[i]
                return torch._weight_int8pack_mm(h, q, s.squeeze(-1))
        else:
            fn = torch.compile(gemv_int8, fullgraph=True)

            def layer(h: torch.Tensor, i: int) -> torch.Tensor:
                q, s = packed[i]
                return fn(h, q, s)
        got = layer(x0, 0)
        err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
        assert err < 3e-2, f"int8 GEMV relative error {err}"

    def token(h: torch.Tensor) -> torch.Tensor:
        for i in range(layers):
            h = layer(h, i)
        return h * (1.0 / h.float().abs().amax().clamp(min=1e-6)).to(h.dtype)  # keep the values bounded

    h = x0
    for _ in range(3):  # warm-up (cuBLAS handles, the compile)
        h = token(h)
    if cuda:
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    times = []
    for _ in range(args.tokens):
        times.append(time.perf_counter())
        h = token(h)
        mark_step()
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = "bf16 weights" if args.int8 is None else f"int8 weights ({args.int8})"
    print(f"{kind}: mean step time over steps 2..{args.tokens - 1}: {per * 1e3:.3f} ms; |h| {h.float().norm().item():.3f}")


if __name__ == "__main__":
    main()
