"""Int4 weight-only GEMMs (tinygemm, `torch._weight_int4pack_mm`) used for a large-batch prefill.

Prefill of 2 Llama-3-8B-shaped layers (width 4096, 32 heads of 128, RMSNorm, causal SDPA, SwiGLU
14336) and a bf16 32,000-token head on the last position, bf16 activations, inference mode, 4
prompts x 1,024 tokens per step. The projections' weights are int4 (group size 128 along K,
power-of-two bf16 scales, zero 0: w = (q - 8) * s), 486M weights. The baseline runs every projection
through PyTorch's int4 weight-only kernel (`_convert_weight_to_int4pack` + `_weight_int4pack_mm`,
the kernel torchao's int4 weight-only quantisation calls), which is built for decode-sized M; here
M = 4,096 rows per GEMM. Variants (the same weights, exactly: (q - 8) * s is a bf16 value):
  dequant       per call: unpack the uint8 nibbles, scale to a bf16 weight, `F.linear` (cuBLAS)
  bf16_weights  the weights dequantised once at load and kept in bf16, `F.linear`
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("dequant", "bf16_weights")
G, TILES = 128, 8
BF = torch.bfloat16


class Int4Linear:
    def __init__(self, n: int, k: int, gen: torch.Generator, variant: str | None) -> None:
        self.n, self.k, self.variant = n, k, variant
        q = torch.randint(0, 16, (n, k), device=DEVICE, dtype=torch.uint8, generator=gen)
        self.s = (2.0 ** -torch.randint(7, 9, (n, k // G), device=DEVICE, generator=gen).float()).to(BF)
        self.w = self.dequant_from(q) if variant == "bf16_weights" else None
        self.nib = (q[:, ::2] << 4 | q[:, 1::2]).contiguous() if variant == "dequant" else None
        if variant is None:
            self.sz = torch.stack([self.s, torch.zeros_like(self.s)], -1).transpose(0, 1).contiguous()
            self.packed = self.pack(q)

    def dequant_from(self, q: torch.Tensor) -> torch.Tensor:
        return ((q.to(BF) - 8).view(self.n, self.k // G, G) * self.s[:, :, None]).view(self.n, self.k)

    def pack(self, q: torch.Tensor) -> torch.Tensor:
        if not CUDA:
            return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), TILES)
        probe = torch.randn(16, self.k, device=DEVICE, dtype=BF)
        ref = F.linear(probe, self.dequant_from(q)).float()
        for nib in ((q[:, ::2] << 4 | q[:, 1::2]), (q[:, 1::2] << 4 | q[:, ::2])):  # nibble order: check, not assume
            packed = torch.ops.aten._convert_weight_to_int4pack(nib.contiguous(), TILES)
            out = torch.ops.aten._weight_int4pack_mm(probe, packed, G, self.sz).float()
            if (out - ref).abs().max() <= 0.02 * ref.abs().max():
                return packed
        raise RuntimeError("int4 packing does not reproduce the bf16 weight")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.k)
        if self.variant is None:
            mm = torch.ops.aten._weight_int4pack_mm if CUDA else torch.ops.aten._weight_int4pack_mm_for_cpu
            y = mm(x2, self.packed, G, self.sz)
        elif self.variant == "dequant":
            assert self.nib is not None
            y = F.linear(x2, self.dequant_from(torch.stack((self.nib >> 4, self.nib & 15), -1).view(self.n, self.k)))
        else:
            y = F.linear(x2, self.w)
        return y.view(*x.shape[:-1], self.n)


def rms(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=1e-5)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, ffn, layers, vocab, batch, seq = (4096, 32, 14336, 2, 32000, 4, 1024) if CUDA else (256, 4, 512, 2, 500, 2, 32)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    blocks = [(Int4Linear(3 * dim, dim, gen, args.variant), Int4Linear(dim, dim, gen, args.variant),
               Int4Linear(2 * ffn, dim, gen, args.variant), Int4Linear(dim, ffn, gen, args.variant)) for _ in range(layers)]
    head = (torch.randn(vocab, dim, device=DEVICE, generator=gen) * dim ** -0.5).to(BF)
    prompts = torch.randn(4, batch, seq, dim, device=DEVICE, generator=gen).to(BF)
    tokens = torch.zeros((), device=DEVICE, dtype=torch.int64)
    check = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            x = prompts[i % 4]
            for qkv, o, gate_up, down in blocks:
                q, k, v = qkv(rms(x)).view(batch, seq, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
                x = x + o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, dim))
                g, u = gate_up(rms(x)).chunk(2, -1)
                x = x + down(F.silu(g) * u)
            last = rms(x[:, -1])
            tokens += F.linear(last, head).argmax(-1).sum()
            check += last.float().abs().mean()
            timer.end()
    timer.report(f"int4_prefill variant={args.variant or 'baseline'} token checksum {int(tokens.item())} "
                 f"mean |h| {check.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
