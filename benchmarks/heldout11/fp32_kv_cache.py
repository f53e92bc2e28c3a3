"""Batched greedy decoding with a bf16 GPT-NeoX-style model whose K/V cache was allocated with the default float32 dtype.

Precision. A GPT-NeoX/Pythia-style decoder (8 layers of width 2048, 16 heads of 128, rotary on the
first 32 dimensions of each head, parallel attention + MLP residual, GELU MLP 8192, untied 50,304
token head), bf16 weights, inference mode. 16 prompts of 1,024 tokens are prefilled once; each step
decodes 16 greedy tokens (positions 1,024 to 1,039, the same every step). The per-layer K/V cache
is `torch.zeros(16, 16, 1040, 128, device=...)`: float32, the default dtype. Each token writes its
bf16 keys and values into it (up-cast) and attends over `k_cache[:, :, :pos + 1].to(q.dtype)` and
the same for V: the whole filled cache is read in float32 and a bf16 copy of it is written and read
again by SDPA, in every layer at every token.

Variant `bf16_cache`: the cache allocated with `dtype=torch.bfloat16` (the `.to(q.dtype)` calls
become no-ops); the same values are stored and read.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("bf16_cache",)
if CUDA:
    BATCH, PROMPT, NEW, DIM, HEADS, LAYERS, VOCAB = 16, 1024, 16, 2048, 16, 8, 50304
else:
    BATCH, PROMPT, NEW, DIM, HEADS, LAYERS, VOCAB = 2, 16, 4, 64, 4, 2, 512
HEAD_DIM = DIM // HEADS
ROT = HEAD_DIM // 4
MAX_LEN = PROMPT + NEW


class Layer(nn.Module):
    """GPT-NeoX block: x + attn(ln1(x)) + mlp(ln2(x)), partial rotary, a K/V cache per layer."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.dense = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.k_cache: torch.Tensor | None = None
        self.v_cache: torch.Tensor | None = None

    def rotary(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r, rest = t[..., :ROT], t[..., ROT:]
        a, b = r.chunk(2, -1)
        return torch.cat((r * cos + torch.cat((-b, a), -1) * sin, rest), -1)

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        assert self.k_cache is not None and self.v_cache is not None
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, cos, sin), self.rotary(k, cos, sin)
        end = start + n
        self.k_cache[:, :, start:end] = k
        self.v_cache[:, :, start:end] = v
        keys = self.k_cache[:, :, :end].to(q.dtype)
        values = self.v_cache[:, :, :end].to(q.dtype)
        att = F.scaled_dot_product_attention(q, keys, values, is_causal=n > 1)
        att = self.dense(att.transpose(1, 2).reshape(b, n, DIM))
        return x + att + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, ROT, 2, dtype=torch.float32) / ROT))
        ang = torch.outer(torch.arange(MAX_LEN, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos())
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin())

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        end = start + tokens.shape[1]
        cos, sin = self.cos[start:end], self.sin[start:end]
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x, start, cos, sin)
        return self.head(self.ln_f(x[:, -1]))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):  # 0.5B weights: built and drawn on the GPU
        model = Decoder()
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    model = model.to(torch.bfloat16)
    cache_dtype = torch.bfloat16 if args.variant == "bf16_cache" else None  # None: the default (float32)
    for layer in model.layers:
        layer.k_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HEAD_DIM, device=DEVICE, dtype=cache_dtype)
        layer.v_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HEAD_DIM, device=DEVICE, dtype=cache_dtype)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=gen)
    total = torch.zeros((), device=DEVICE, dtype=torch.int64)
    timer = StepTimer()
    with torch.inference_mode():
        first = model(prompt, 0).argmax(-1, keepdim=True)
        for _ in range(args.steps):
            timer.tick()
            tok = first
            for t in range(NEW):
                tok = model(tok, PROMPT + t).argmax(-1, keepdim=True)
                total += tok.sum()
            timer.end()
    timer.report(f"fp32_kv_cache variant={args.variant or 'baseline'} token checksum {total.item()}")


if __name__ == "__main__":
    main()
