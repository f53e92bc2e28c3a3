"""4-bit NF4 LLM scoring in float16 whose `Linear4bit` layers compute in float32 (bitsandbytes' default compute dtype).

Workload: scoring prompts (mean next-token NLL) with two Mistral-7B-shaped decoder layers (width 4096,
32 query / 8 K/V heads of 128, rotary, RMSNorm, SwiGLU 14,336) and the 32,000-token head, loaded the
QLoRA way: `from_pretrained(torch_dtype=torch.float16, quantization_config=BitsAndBytesConfig(
load_in_4bit=True, bnb_4bit_quant_type="nf4"))` with no `bnb_4bit_compute_dtype`, which Hugging Face
fills in as float32. Every projection (14 per model, 436M weights) holds NF4 codes (two per byte)
and a float32 absmax per 64 weights; each call runs what bitsandbytes' `Linear4bit.forward` runs
for a float16 input with a float32 compute dtype: the input cast to float32, the weight dequantized
(the code book lookup and absmax scaling, here in tensor ops) to float16 and then cast to float32,
a float32 GEMM at the default "highest" matmul precision (no tensor cores), the output cast back to
float16. 2 prompts of 512 tokens per step, inference mode; the embeddings, norms and head are
float16.

Variant `fp16_compute`: `bnb_4bit_compute_dtype=torch.float16`: the same dequantized float16
weights, float16 GEMMs (float32 accumulation); the NLL differs by float16 rounding.

Variant `compiled` (extra, timed but not recorded): the baseline model under `torch.compile`
(default mode).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, KV_HEADS, FF, LAYERS, VOCAB, BATCH, SEQ = 4096, 32, 8, 14336, 2, 32000, 2, 512
else:
    DIM, HEADS, KV_HEADS, FF, LAYERS, VOCAB, BATCH, SEQ = 128, 4, 2, 256, 2, 256, 2, 16
HEAD_DIM = DIM // HEADS
BLOCK = 64
# bitsandbytes' NF4 code book (quantiles of N(0, 1), normalised to [-1, 1])
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0)
DTYPE = torch.float16 if CUDA else torch.float32


class Linear4bit(nn.Module):
    """An NF4-quantized Linear (no bias) that dequantizes per call and computes in `compute_dtype`."""

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.compute_dtype = compute_dtype
        self.weight_dtype = weight.dtype  # bitsandbytes' quant_state.dtype
        code = torch.tensor(NF4, device=weight.device)
        blocks = weight.float().reshape(-1, BLOCK)
        absmax = blocks.abs().amax(1)
        normed = blocks / absmax[:, None]
        idx = torch.bucketize(normed, (code[1:] + code[:-1]) / 2).to(torch.uint8)  # nearest code
        idx = idx.view(-1, 2)
        self.register_buffer("packed", (idx[:, 0] << 4) | idx[:, 1])
        self.register_buffer("absmax", absmax)
        self.register_buffer("lut", torch.stack([code.repeat_interleave(16), code.repeat(16)], -1))  # byte -> 2 values

    def dequantize(self) -> torch.Tensor:
        """NF4 codes and absmax -> the weight in its original dtype (bitsandbytes' `dequantize_4bit`)."""
        w = (self.lut[self.packed.int()].view(-1, BLOCK) * self.absmax[:, None]).to(self.weight_dtype)
        return w.view(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        out = F.linear(x, self.dequantize().to(x.dtype))  # MatMul4Bit: dequantize_4bit(...).to(A.dtype)
        return out.to(inp_dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_norm, self.post_norm = RMSNorm(DIM), RMSNorm(DIM)
        shapes = {"q": (HEADS * HEAD_DIM, DIM), "k": (KV_HEADS * HEAD_DIM, DIM), "v": (KV_HEADS * HEAD_DIM, DIM),
                  "o": (DIM, HEADS * HEAD_DIM), "gate": (FF, DIM), "up": (FF, DIM), "down": (DIM, FF)}
        self.proj = nn.ModuleDict({name: nn.Linear(cin, cout, bias=False) for name, (cout, cin) in shapes.items()})

    def quantize(self, compute_dtype: torch.dtype) -> None:
        """Replace every projection with its NF4 `Linear4bit` (what `from_pretrained` does at load)."""
        for name, lin in list(self.proj.items()):
            self.proj[name] = Linear4bit(lin.weight.data, compute_dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.input_norm(x)
        q = self.proj["q"](h).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.proj["k"](h).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.proj["v"](h).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True, enable_gqa=True)
        x = x + self.proj["o"](a.transpose(1, 2).reshape(b, t, DIM))
        h = self.post_norm(x)
        return x + self.proj["down"](F.silu(self.proj["gate"](h)) * self.proj["up"](h))


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)  # bitsandbytes leaves the head unquantized
        inv = 1.0 / 1e6 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        freqs = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat([freqs, freqs], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([freqs, freqs], -1).sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> mean next-token NLL (float32)."""
        x = self.embed(ids)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x[:, :-1]))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def main() -> None:
    args = options(__doc__, ("fp16_compute", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Scorer()
    for layer in model.layers:
        for lin in layer.proj.values():
            nn.init.normal_(lin.weight, std=1.0 / math.sqrt(lin.in_features))
    model = model.to(DTYPE).eval()
    compute = DTYPE if args.variant == "fp16_compute" else torch.float32
    for layer in model.layers:
        layer.quantize(compute)
    net = torch.compile(model) if args.variant == "compiled" else model
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prompts = torch.randint(0, VOCAB, (4, BATCH, SEQ), device=DEVICE, generator=gen)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            total += net(prompts[step % 4])
            timer.end()
    timer.report(f"nf4_fp32_compute variant={args.variant or 'baseline'} mean nll {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
