"""Scoring (perplexity evaluation) with a Llama-style model left in float32, the dtype it was built in.

Inference: token embedding + learned positions, 12 pre-norm blocks (width 1536, 12 heads of 128,
RMSNorm, causal SDPA, SwiGLU MLP 4096), final RMSNorm, head over 32,000 tokens (~390M weights);
each step scores 2 sequences of 1,024 tokens (cross-entropy of every next token). The baseline keeps
the float32 weights and PyTorch's default `float32_matmul_precision("highest")`, so every GEMM runs
in full float32 without tensor cores. Variants (the same model and tokens):
  tf32  `torch.set_float32_matmul_precision("high")` (TF32 tensor cores, float32 storage)
  bf16  the weights cast once to bfloat16 (`model.to(torch.bfloat16)`), logits cast to float32 for the loss
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("tf32", "bf16")


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim, eps=1e-6), nn.RMSNorm(dim, eps=1e-6)
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate, self.up, self.down = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LM(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, heads: int, ffn: int, layers: int) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(dim, eps=1e-6), nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos.weight[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    vocab, seq, dim, heads, ffn, layers, batch = (32000, 1024, 1536, 12, 4096, 12, 2) if CUDA else (500, 32, 64, 4, 176, 2, 2)
    model = LM(vocab, seq, dim, heads, ffn, layers).to(DEVICE).eval()
    if args.variant == "tf32":
        torch.set_float32_matmul_precision("high")
    elif args.variant == "bf16":
        model.to(torch.bfloat16)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=DEVICE, generator=gen)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            logits = model(data[i % 4, :, :-1])
            total += F.cross_entropy(logits.flatten(0, 1).float(), data[i % 4, :, 1:].flatten())
            timer.end()
    timer.report(f"fp32_scoring variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
