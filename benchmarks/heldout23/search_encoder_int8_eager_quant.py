"""Code-search query encoder served with int8 (W8A8) Linears whose quantize and rescale steps run eagerly.

A BERT-style encoder (12 pre-norm layers of width 1,024, 16 heads, GELU MLPs of 4,096, bf16,
inference, 64 queries of 128 tokens per call, mean-pooled embeddings) whose four Linears per layer
are dynamic W8A8: int8 weights with per-channel scales (quantized once at load), activations
quantized per token at every call, `torch._int_mm` and a rescale of the int32 result. Written as
torchao's reference code reads, but run without `torch.compile`: the activation quantization
(float copy, abs, row max, divide, round, clamp, cast) and the rescale (float, two scale products,
bias, bf16 cast) are a dozen separate passes over (8,192 x K) and (8,192 x N) tensors, ~5.6 GB of
traffic per layer around ~0.2 ms of int8 GEMMs.

--variant compiled_qlinear: the same `qlinear` function through `torch.compile(dynamic=True)`, as
torchao's docs prescribe for its quantized layers: the quantization becomes a row reduction and one
fused pass, the rescale one fused pass; the same `torch._int_mm` between them.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("compiled_qlinear",)).parse_args()
if CUDA:
    DIM, HEADS, LAYERS, FFN, VOCAB, BATCH, LEN = 1024, 16, 12, 4096, 32768, 64, 128
else:
    DIM, HEADS, LAYERS, FFN, VOCAB, BATCH, LEN = 32, 2, 2, 64, 256, 4, 24
DTYPE = torch.bfloat16 if CUDA else torch.float32


def qlinear(x: torch.Tensor, wq_t: torch.Tensor, ws: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """y = x @ W.T + b with x quantized per row (symmetric int8) and W per output channel."""
    xf = x.reshape(-1, x.shape[-1]).float()
    xs = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-5) / 127.0
    xq = (xf / xs).round().clamp(-127, 127).to(torch.int8)
    acc = torch._int_mm(xq, wq_t)
    return (acc.float() * xs * ws + b).to(x.dtype).view(*x.shape[:-1], -1)


qlinear_fn = torch.compile(qlinear, dynamic=True) if args.variant == "compiled_qlinear" else qlinear


class QLinear(nn.Module):
    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        w = torch.randn(fout, fin) * fin ** -0.5
        ws = w.abs().amax(1).clamp(min=1e-8) / 127.0
        self.wq_t = (w / ws[:, None]).round().clamp(-127, 127).to(torch.int8).t()  # (in, out) view of (out, in)
        self.ws, self.b = ws, torch.randn(fout) * 0.01

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return qlinear_fn(x, self.wq_t, self.ws, self.b)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = QLinear(DIM, 3 * DIM), QLinear(DIM, DIM)
        self.up, self.down = QLinear(DIM, FFN), QLinear(FFN, DIM)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class QueryEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(LEN, DIM)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(DIM)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        valid = torch.arange(LEN, device=ids.device)[None, :] < lengths[:, None]
        x = (self.tok(ids) + self.pos.weight).to(DTYPE)
        for layer in self.layers:
            x = layer(x, valid[:, None, None, :])
        x = self.norm(x).float() * valid[..., None]
        return F.normalize(x.sum(1) / lengths[:, None], dim=-1)


torch.manual_seed(0)
with torch.device(DEVICE):
    model = QueryEncoder().to(DTYPE).eval()  # int8 weights and float32 scales are plain attributes: unchanged
gen = torch.Generator(DEVICE).manual_seed(23)
ids = torch.randint(0, VOCAB, (8, BATCH, LEN), device=DEVICE, generator=gen)
lengths = torch.randint(LEN // 4, LEN + 1, (8, BATCH), device=DEVICE, generator=gen)
corpus = F.normalize(torch.randn(4096, DIM, device=DEVICE, generator=gen), dim=-1)

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for i in range(args.steps):
        timer.tick()
        emb = model(ids[i % 8], lengths[i % 8])
        total += (emb @ corpus.t()).amax(1).sum()
        timer.end()
timer.report(f"search_encoder_int8_eager_quant variant={args.variant or 'baseline'} "
             f"top-score checksum {total.item() / args.steps:.4f}")
