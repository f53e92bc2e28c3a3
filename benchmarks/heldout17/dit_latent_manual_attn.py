"""Training a DiT-style latent diffusion transformer whose self-attention is written out by hand.

A class-conditional diffusion transformer (DiT-S/2-like: 2x2 patches of a 4x64x64 latent, 1,024
tokens, width 384, 6 heads, 12 blocks with adaLN-Zero modulation) trained for noise prediction in
bf16 autocast with fused AdamW. Its attention is the textbook formula most research code starts
from: `softmax(q @ k.transpose(-2, -1) * scale) @ v`, which writes the (batch, heads, 1024, 1024)
score and probability matrices to memory in the forward pass and reads them back in the backward.

Variants:
- baseline: explicit matmul - softmax - matmul attention.
- sdpa: `torch.nn.functional.scaled_dot_product_attention(q, k, v)`, which picks a fused
  (FlashAttention-style) kernel that never materialises the score matrix.

Sources: the docstring of `torch.nn.functional.scaled_dot_product_attention` (installed torch
2.13: "Efficient implementation equivalent to the following", followed by the explicit formula); the PyTorch tutorial "(Beta) Implementing High-Performance Transformers with Scaled
Dot Product Attention" and the DiT paper's architecture (Peebles & Xie, 2023), cited from memory.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    def __init__(self, d: int, heads: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.n1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.n2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)))
        return scores.softmax(dim=-1) @ v

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        s1, sc1, g1, s2, sc2, g2 = self.ada(c).chunk(6, dim=1)
        q, k, v = self.qkv(modulate(self.n1(x), s1, sc1)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + g1[:, None] * self.proj(self.attend(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + g2[:, None] * self.fc2(F.gelu(self.fc1(modulate(self.n2(x), s2, sc2)), approximate="tanh"))


class DiT(nn.Module):
    def __init__(self, latent: int, d: int, heads: int, depth: int, classes: int, fused: bool) -> None:
        super().__init__()
        self.p, self.d = 2, d
        self.patch = nn.Conv2d(4, d, 2, stride=2)
        self.pos = nn.Parameter(torch.randn(1, (latent // 2) ** 2, d) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.y_emb = nn.Embedding(classes + 1, d)
        self.blocks = nn.ModuleList(DiTBlock(d, heads, fused) for _ in range(depth))
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.out = nn.Linear(d, 2 * 2 * 4)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b, _, hgt, wid = x.shape
        h = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        freqs = torch.exp(-math.log(10000.0) * torch.arange(128, device=x.device) / 128)
        arg = t.float()[:, None] * freqs[None]
        c = self.t_mlp(torch.cat([arg.cos(), arg.sin()], dim=1)) + self.y_emb(y)
        for blk in self.blocks:
            h = blk(h, c)
        shift, scale = self.ada(c).chunk(2, dim=1)
        h = self.out(modulate(self.norm(h), shift, scale))  # (b, tokens, 2*2*4)
        gh, gw = hgt // 2, wid // 2
        return h.view(b, gh, gw, 2, 2, 4).permute(0, 5, 1, 3, 2, 4).reshape(b, 4, hgt, wid)


def main() -> None:
    args = options(__doc__, ("sdpa",)).parse_args()
    torch.manual_seed(0)
    batch, latent, d, heads, depth = (16, 64, 384, 6, 12) if CUDA else (2, 8, 32, 4, 2)
    classes = 1000
    with torch.device(DEVICE):
        model = DiT(latent, d, heads, depth, classes, args.variant == "sdpa")
    opt = adamw(list(model.parameters()))
    alpha_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device=DEVICE), 0)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    latents = torch.randn(4, batch, 4, latent, latent, device=DEVICE, generator=gen)
    labels = torch.randint(0, classes, (4, batch), device=DEVICE, generator=gen)
    timer = StepTimer()
    total = torch.zeros((), device=DEVICE)
    for i in range(args.steps):
        timer.tick()
        x0, y = latents[i % 4], labels[i % 4]
        t = torch.randint(0, 1000, (batch,), device=DEVICE, generator=gen)
        noise = torch.randn(x0.shape, device=DEVICE, generator=gen)
        ab = alpha_bar[t][:, None, None, None]
        with bf16():
            pred = model(ab.sqrt() * x0 + (1 - ab).sqrt() * noise, t, y)
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"dit_latent_manual_attn variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
