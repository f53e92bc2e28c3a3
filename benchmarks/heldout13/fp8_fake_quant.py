"""FP8-calibrated prefill served through simulated (quantise-dequantise) FP8 linears in bf16.

Workload: prompt prefill of a Phi-3-mini-shaped decoder: 4 layers of width 3072 (32 heads of 96,
fused qkv 3072 -> 9216, rotary on the full head, RMSNorm, causal SDPA, fused gate_up 3072 -> 16384,
SwiGLU, down 8192 -> 3072), untied 32,064-token embedding and head, inference mode; 4 prompts of
2,048 tokens per step, next token from the last position's logits. The model was quantised to FP8
(e4m3) at start-up: per-tensor weight scales and static per-tensor input scales calibrated on one
512-token prompt, both rounded up to powers of two. Every projection runs as `QDQLinear`, the layout the
quantisation toolkit exports for evaluation: quantise the input to e4m3 and back (`x / s`, clamp,
`.to(float8_e4m3fn)`, `.to(bf16) * s`), dequantise the stored e4m3 weight (`w.to(bf16) * s_w`) and call
`F.linear` in bf16.

Variant `scaled_mm`: `FP8Linear`: the same input quantisation, then `torch._scaled_mm` on the e4m3
input and the stored e4m3 weight with the two scales (bf16 out): the same values (power-of-two scales
make the dequantised products exact), FP8 tensor cores, no dequantised weight.

Variant `compiled` (added after the first GPU run, to measure that run's first suggestion):
the QDQ model under `torch.compile` (default mode), nothing else changed.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, FF, LAYERS, VOCAB, BATCH, SEQ = 3072, 32, 8192, 4, 32064, 4, 2048
else:
    DIM, HEADS, FF, LAYERS, VOCAB, BATCH, SEQ = 64, 4, 128, 2, 320, 2, 32
HEAD_DIM = DIM // HEADS
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """The smallest power of two s with amax / s <= FP8_MAX (float32, 0-d)."""
    return torch.exp2(torch.ceil(torch.log2(amax.float().clamp(min=1e-12) / FP8_MAX)))


class QDQLinear(nn.Module):
    """Simulated FP8 linear: quantise-dequantise the input, dequantise the weight, bf16 GEMM."""

    def __init__(self, weight_fp8: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight_fp8)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("input_scale", input_scale)

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        return (x / self.input_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quantize_input(x).to(torch.bfloat16) * self.input_scale
        w = self.weight.to(torch.bfloat16) * self.weight_scale
        return F.linear(x, w)


class FP8Linear(QDQLinear):
    """The same FP8 linear on FP8 tensor cores."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq = self.quantize_input(x).reshape(-1, x.shape[-1])
        y = torch._scaled_mm(xq, self.weight.t(), scale_a=self.input_scale, scale_b=self.weight_scale,
                             out_dtype=torch.bfloat16)
        return y.view(*x.shape[:-1], -1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], -1)


class Phi3Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(DIM), RMSNorm(DIM)
        self.qkv_proj = nn.Linear(DIM, 3 * DIM, bias=False)
        self.o_proj = nn.Linear(DIM, DIM, bias=False)
        self.gate_up_proj = nn.Linear(DIM, 2 * FF, bias=False)
        self.down_proj = nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(self.input_layernorm(x)).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, DIM)
        x = x + self.o_proj(a)
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Phi3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Phi3Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        freqs = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
        emb = torch.cat([freqs, freqs], -1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits of the last position."""
        x = self.embed_tokens(ids)
        cos, sin = self.cos[: ids.shape[1]].to(x.dtype), self.sin[: ids.shape[1]].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x[:, -1]))


@torch.no_grad()
def quantize_fp8(model: Phi3, calib_ids: torch.Tensor, linear_cls: type[QDQLinear]) -> None:
    """Calibrate static input scales on `calib_ids`, then swap every layer projection for `linear_cls`."""
    amax: dict[str, torch.Tensor] = {}
    hooks = []
    for name, mod in model.layers.named_modules():
        if isinstance(mod, nn.Linear):
            def record(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor, name: str = name) -> None:
                a = inp[0].detach().abs().amax()
                amax[name] = torch.maximum(amax[name], a) if name in amax else a
            hooks.append(mod.register_forward_hook(record))
    model(calib_ids)
    for h in hooks:
        h.remove()
    for name, mod in list(model.layers.named_modules()):
        if not isinstance(mod, nn.Linear):
            continue
        w_scale = pow2_scale(mod.weight.abs().amax())
        w_fp8 = (mod.weight / w_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        parent_name, _, child = name.rpartition(".")
        parent = model.layers.get_submodule(parent_name)
        setattr(parent, child, linear_cls(w_fp8, w_scale, pow2_scale(amax[name])))


def main() -> None:
    args = options(__doc__, ("scaled_mm", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Phi3()
    for layer in model.layers:  # trained-looking weight scales rather than nn.Linear's uniform init
        for lin in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj):
            nn.init.normal_(lin.weight, std=1.0 / math.sqrt(lin.in_features))
    model = model.to(DEVICE, torch.bfloat16).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    calib = torch.randint(0, VOCAB, (1, SEQ // 4), device=DEVICE, generator=gen)
    quantize_fp8(model, calib, FP8Linear if args.variant == "scaled_mm" else QDQLinear)
    prompts = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE, generator=gen)
    if args.variant == "compiled":
        model = torch.compile(model)

    tokens = torch.zeros((), device=DEVICE, dtype=torch.int64)
    logit_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            logits = model(prompts)
            tokens += logits.argmax(-1).sum()
            logit_sum += logits.float().mean()
            timer.end()
    timer.report(f"fp8_fake_quant variant={args.variant or 'baseline'} next-token checksum {tokens.item()} "
                 f"mean logit {logit_sum.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
