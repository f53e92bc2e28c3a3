"""Protein masked-LM (ESM-2 style) training with the flash, memory-efficient and cuDNN SDPA backends switched off.

Attention. An ESM-2-style protein language model (33-token vocabulary, 6 pre-norm layers of width
768, 12 heads of 64 with rotary embeddings, GELU MLP 3072, tied LM head), 16 sequences of 1,024
residues per step, 15 % of positions masked, cross-entropy on them, bf16 autocast, fused AdamW. At
start-up the script turns off `torch.backends.cuda.enable_flash_sdp`, `enable_mem_efficient_sdp`
and `enable_cudnn_sdp` ("bitwise-reproducible attention"), so every
`F.scaled_dot_product_attention` call runs the composite math path: the (16, 12, 1024, 1024) score
matrix is materialised (in float32 for bf16 inputs), soft-maxed, saved for backward and
back-propagated through explicit batched GEMMs.

Variant `flash`: the backend switches left at their defaults (the flash kernel takes the bf16,
head-dim-64, unmasked attention).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("flash",)
if CUDA:
    BATCH, LENGTH, DIM, HEADS, LAYERS = 16, 1024, 768, 12, 6
else:
    BATCH, LENGTH, DIM, HEADS, LAYERS = 2, 64, 64, 4, 2
VOCAB, MASK_ID = 33, 32


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


class Layer(nn.Module):
    """Pre-norm rotary self-attention and GELU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        att = F.scaled_dot_product_attention(q, k, v)
        x = x + self.o(att.transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class ProteinLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        inv = 1.0 / (10000 ** (torch.arange(0, DIM // HEADS, 2, dtype=torch.float32) / (DIM // HEADS)))
        ang = torch.outer(torch.arange(LENGTH, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos())
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin())

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        logits = F.linear(self.norm(x), self.emb.weight)
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    if args.variant != "flash":  # "reproducible attention": only the math path left
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)
    torch.manual_seed(0)
    model = ProteinLM().to(DEVICE)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    pool = 4
    seqs = torch.randint(4, 24, (pool, BATCH, LENGTH), device=DEVICE, generator=gen)  # the 20 amino acids
    masked = torch.rand(pool, BATCH, LENGTH, device=DEVICE, generator=gen) < 0.15
    inputs = seqs.masked_fill(masked, MASK_ID)
    labels = seqs.masked_fill(~masked, -100)

    def loss_of(i: int) -> torch.Tensor:
        with bf16():
            return model(inputs[i % pool], labels[i % pool])

    train("sdpa_math_backend", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
