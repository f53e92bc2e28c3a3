"""Masked-language-model fine-tuning of an ESM-style protein language model in plain float32.

A protein sequence encoder in the style of ESM-2 (33-token amino-acid vocabulary, rotary position
embeddings, 12 pre-norm blocks of width 640 with 20 heads, GELU MLP 4x) fine-tuned with the BERT/ESM
masking objective (15 % of residues masked, 80/10/10 replacement) on batches of 16 sequences of 256
residues, AdamW (fused). The script does what a first training script does: no autocast, no TF32
setting, so every GEMM runs in full float32 (PyTorch's default `float32_matmul_precision` is
"highest") and the tensor cores, which need a 16-bit or TF32 input, are unused.

Variants:
- baseline: float32 weights and activations, float32 GEMMs.
- bf16_autocast: the same float32 weights and optimizer, forward and loss under
  `torch.autocast("cuda", dtype=torch.bfloat16)` (mixed precision), so the GEMMs and the fused
  attention run in bf16 on tensor cores.

Sources: `torch.autocast` and `torch.set_float32_matmul_precision` docstrings (installed torch
2.13: "highest" is the default, float32 matrix multiplications use float32 internally), the PyTorch
"Automatic Mixed Precision" recipe and performance tuning guide (cited from memory), and the ESM-2
architecture (Lin et al., 2023, cited from memory).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class ESMBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ProteinLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d, padding_idx=1)
        self.blocks = nn.ModuleList(ESMBlock(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.lm_dense, self.lm_norm = nn.Linear(d, d), nn.LayerNorm(d)
        self.lm_out = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        t = tokens.size(1)
        half = self.embed.embedding_dim // self.heads // 2
        inv = 1.0 / (10000 ** (torch.arange(half, device=tokens.device, dtype=torch.float32) / half))
        ang = torch.arange(t, device=tokens.device, dtype=torch.float32)[:, None] * inv[None]
        cos, sin = ang.cos(), ang.sin()
        keep = (~pad)[:, None, None, :]
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin, keep)
        x = self.norm(x)
        return self.lm_out(self.lm_norm(F.gelu(self.lm_dense(x))))


def mask_tokens(tokens: torch.Tensor, pad: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT/ESM masking: 15 % of residues; of those 80 % <mask> (32), 10 % a random residue, 10 % unchanged."""
    r = torch.rand(tokens.shape, device=tokens.device, generator=gen)
    chosen = (r < 0.15) & ~pad
    labels = torch.where(chosen, tokens, -100)
    rnd = torch.randint(4, 24, tokens.shape, device=tokens.device, generator=gen)
    inp = torch.where(chosen & (r < 0.12), 32, torch.where(chosen & (r < 0.135), rnd, tokens))
    return inp, labels


def main() -> None:
    args = options(__doc__, ("bf16_autocast",)).parse_args()
    torch.manual_seed(0)
    batch, seq, d, heads, layers = (16, 256, 640, 20, 12) if CUDA else (4, 32, 40, 4, 2)
    vocab = 33
    with torch.device(DEVICE):
        model = ProteinLM(vocab, d, heads, layers)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    residues = torch.randint(4, 24, (4, batch, seq), device=DEVICE, generator=gen)  # the 20 standard amino acids
    lengths = torch.randint(seq // 2, seq + 1, (4, batch, 1), device=DEVICE, generator=gen)
    pads = torch.arange(seq, device=DEVICE) >= lengths
    residues = torch.where(pads, 1, residues)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    for i in range(args.steps):
        timer.tick()
        inp, labels = mask_tokens(residues[i % 4], pads[i % 4], gen)
        if args.variant == "bf16_autocast":
            with bf16():
                logits = model(inp, pads[i % 4])
        else:
            logits = model(inp, pads[i % 4])
        loss = F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"esm_mlm_fp32 variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
