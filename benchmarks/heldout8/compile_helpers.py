"""`@torch.compile` on small helper functions inside an eager Llama-style model.

Causal LM training: token embedding, 8 pre-norm blocks (width 512, 8 heads of 64, RMSNorm, rotary
embeddings, causal SDPA, SwiGLU MLP 1408), final RMSNorm, untied head over 32,000 tokens,
cross-entropy, 8 x 512 tokens, bf16 autocast, fused AdamW. The baseline wraps the elementwise
helpers (`rms_norm`, `rope`, `swiglu`) in `torch.compile` and runs the rest eagerly, so every block
makes 5 compiled calls forward (each with dynamo's guards, AOTAutograd's wrapper and a
`CompiledFunction` node whose backward is another compiled call) around ~12 eager ops. Variants (the
same model, weights and data; the helpers then plain Python):
  compile_blocks  each block compiled on its own (`torch.compile(block)`, regional compilation)
  compile_model   the whole forward and the loss as one compiled function
"""

import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options

VARIANTS = ("compile_blocks", "compile_model")


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return F.silu(g) * u


H: dict[str, Callable[..., torch.Tensor]] = {"rms_norm": rms_norm, "rope": rope, "swiglu": swiglu}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate_up, self.down = nn.Linear(dim, 2 * ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(H["rms_norm"](x, self.n1)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(H["rope"](q, cos, sin), H["rope"](k, cos, sin), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        g, u = self.gate_up(H["rms_norm"](x, self.n2)).chunk(2, -1)
        return x + self.down(H["swiglu"](g, u))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, layers, ffn, vocab, batch, seq = (512, 8, 8, 1408, 32000, 8, 512) if CUDA else (64, 4, 2, 176, 500, 2, 32)
    emb, head = nn.Embedding(vocab, dim).to(DEVICE), nn.Linear(dim, vocab, bias=False).to(DEVICE)
    blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers)).to(DEVICE)
    norm = nn.Parameter(torch.ones(dim, device=DEVICE))
    opt = adamw([*emb.parameters(), *head.parameters(), *blocks.parameters(), norm])
    inv = 1.0 / 10000 ** (torch.arange(0, dim // heads, 2, device=DEVICE).float() / (dim // heads))
    ang = torch.arange(seq, device=DEVICE).float()[:, None] * inv
    cos, sin = ang.cos(), ang.sin()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=DEVICE, generator=gen)
    if args.variant is None:
        H.update({k: torch.compile(f) for k, f in H.items()})
    calls = [torch.compile(b) for b in blocks] if args.variant == "compile_blocks" else list(blocks)

    def loss_of(tokens: torch.Tensor) -> torch.Tensor:
        x = emb(tokens[:, :-1])
        for blk in calls:
            x = blk(x, cos, sin)
        logits = head(H["rms_norm"](x, norm))
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    step_loss = torch.compile(loss_of) if args.variant == "compile_model" else loss_of
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            loss = step_loss(data[i % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"compile_helpers variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
