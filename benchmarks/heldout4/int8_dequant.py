"""Batch-1 greedy decoding of a Llama-style model whose linear weights were quantized to int8
(per-output-channel scales) to halve the weight bytes, run in eager mode as
`F.linear(x, w_int8.to(bf16)) * scale`: every call writes and re-reads a bf16 copy of the weight.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/int8_dequant.py
Variants: --variant bf16 (the weights dequantized once at load and kept in bf16), --variant compiled
(the int8 linear written as a batch-1 matrix-vector product, `(x * w.float()).sum(-1) * s`, under
`torch.compile`, which fuses the int8 load, multiply and fp32 reduction into one kernel). Same
quantized weights and prompt cache (bf16 rounds the scale product in another order). On the GPU: 8 layers, width
4096, 32 heads of 128, SwiGLU FFN 11008, vocab 32k (bf16 head), a 1,024-token cache, 16 new tokens
per step from the same position, inference mode. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options

DT = torch.bfloat16 if CUDA else torch.float32


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: (round(w / s), s) with s = max |w| / 127."""
    s = w.abs().amax(1).float().clamp(min=1e-8) / 127
    return torch.round(w.float() / s[:, None]).to(torch.int8), s.to(DT)


def qlinear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Weight-only int8 linear: the weight cast to the activation dtype, then the row scales."""
    return F.linear(x, w.to(x.dtype)) * s


def qmatvec(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The same product for one row of x as multiply and fp32 reduce (meant to run compiled: fused, no bf16 weight copy)."""
    return ((x.unsqueeze(-2).float() * w.float()).sum(-1) * s.float()).to(x.dtype)


def dense(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor | None) -> torch.Tensor:
    """The bf16 variant's linear (weights already dequantized)."""
    return F.linear(x, w)


def rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)


def main() -> None:
    args = options(__doc__, ("bf16", "compiled")).parse_args()
    dim, heads, ffn, layers, vocab, prompt, new = (4096, 32, 11008, 8, 32000, 1024, 16) if CUDA else (64, 4, 96, 2, 100, 16, 4)
    hd = dim // heads
    torch.manual_seed(0)
    shapes = {"qkv": (3 * dim, dim), "o": (dim, dim), "gate_up": (2 * ffn, dim), "down": (dim, ffn)}
    weights = []
    for _ in range(layers):
        layer = {}
        for name, (n, k) in shapes.items():
            wq, s = quantize(torch.randn(n, k, device=DEVICE, dtype=DT) / k**0.5)
            layer[name] = (wq.to(DT) * s[:, None], None) if args.variant == "bf16" else (wq, s)
        weights.append(layer)
    emb = torch.randn(vocab, dim, device=DEVICE, dtype=DT)
    head = torch.randn(vocab, dim, device=DEVICE, dtype=DT) / dim**0.5
    cache_k = [torch.randn(1, heads, prompt + new, hd, device=DEVICE, dtype=DT) for _ in range(layers)]
    cache_v = [torch.randn(1, heads, prompt + new, hd, device=DEVICE, dtype=DT) for _ in range(layers)]
    if args.variant == "compiled":
        lin = torch.compile(qmatvec, dynamic=False)
    else:
        lin = dense if args.variant == "bf16" else qlinear

    def forward(tok: torch.Tensor, pos: int) -> torch.Tensor:
        x = emb[tok].view(1, 1, dim)
        for j, w in enumerate(weights):
            q, k, v = lin(rms(x), *w["qkv"]).view(1, 1, 3, heads, hd).permute(2, 0, 3, 1, 4)
            cache_k[j][:, :, pos] = k[:, :, 0]
            cache_v[j][:, :, pos] = v[:, :, 0]
            a = F.scaled_dot_product_attention(q, cache_k[j][:, :, : pos + 1], cache_v[j][:, :, : pos + 1])
            x = x + lin(a.transpose(1, 2).reshape(1, 1, dim), *w["o"])
            g, u = lin(rms(x), *w["gate_up"]).chunk(2, dim=-1)
            x = x + lin(F.silu(g) * u, *w["down"])
        return (rms(x) @ head.T).view(vocab)

    timer = StepTimer()
    checksum = torch.zeros((), device=DEVICE, dtype=torch.int64)
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            tok = torch.zeros((), dtype=torch.int64, device=DEVICE)
            for t in range(new):
                tok = forward(tok, prompt + t).argmax()
                checksum += tok
            timer.end()
    timer.report(f"int8_dequant variant={args.variant or 'baseline'} token checksum {int(checksum.item())}")


if __name__ == "__main__":
    main()
