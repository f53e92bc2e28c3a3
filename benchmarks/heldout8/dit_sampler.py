"""An eager diffusion sampler at batch 1: a small DiT called twice (classifier-free guidance) per denoising step.

DiT-S/2-style denoiser (4 x 32 x 32 latent, 2 x 2 patches: 256 tokens, width 384, 12 adaLN-Zero
blocks with 6 heads, MLP 1536, timestep and class embeddings), bf16 weights, inference mode. One
step = one image: 10 DDIM steps from a fixed noise, each running the model on the class label and
on the null label (guidance scale 4), then the DDIM update. Every forward is ~330 kernels of a few
microseconds at batch 1, so the eager loop is bound by the host's launch path (20 forwards per
step). Variants (the same weights, noise, labels and schedule):
  cfg_batch   the conditional and unconditional passes as one batch of 2 (half the launches)
  cuda_graph  one denoising step (both passes, guidance, update) captured once in a
              `torch.cuda.CUDAGraph` on static tensors and replayed 10 times per image
              (on the CPU the same step runs eagerly)
"""

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("cfg_batch", "cuda_graph")


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim, elementwise_affine=False), nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down, self.ada = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.Linear(dim, 6 * dim)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(F.silu(c))[:, None].chunk(6, -1)
        q, k, v = self.qkv(self.n1(x) * (1 + sc1) + sh1).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + g1 * self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + g2 * self.down(F.gelu(self.up(self.n2(x) * (1 + sc2) + sh2), approximate="tanh"))


class DiT(nn.Module):
    def __init__(self, dim: int, heads: int, layers: int, side: int) -> None:
        super().__init__()
        self.side, self.dim = side, dim
        self.patch, self.pos = nn.Linear(16, dim), nn.Parameter(torch.randn(1, (side // 2) ** 2, dim) * 0.02)
        self.t_mlp, self.y_emb = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim)), nn.Embedding(1001, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.ada, self.out = nn.LayerNorm(dim, elementwise_affine=False), nn.Linear(dim, 2 * dim), nn.Linear(dim, 16)

    def forward(self, z: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b, p = z.shape[0], self.side // 2
        x = self.patch(z.view(b, 4, p, 2, p, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, p * p, 16)) + self.pos
        freqs = torch.exp(-math.log(10000) * torch.arange(128, device=z.device) / 128)
        c = self.t_mlp(torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], -1).to(x.dtype)) + self.y_emb(y)
        for blk in self.blocks:
            x = blk(x, c)
        sh, sc = self.ada(F.silu(c))[:, None].chunk(2, -1)
        e = self.out(self.norm(x) * (1 + sc) + sh)
        return e.view(b, p, p, 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, 4, self.side, self.side)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, layers, side, steps = (384, 6, 12, 32, 10) if CUDA else (64, 4, 2, 8, 4)
    dt = torch.bfloat16 if CUDA else torch.float32
    model = DiT(dim, heads, layers, side).to(DEVICE, dt).eval()
    abar = torch.cos(torch.linspace(0.02, 0.98, steps + 1, device=DEVICE).flip(0) * math.pi / 2) ** 2  # noise -> clean
    ts = torch.linspace(999, 0, steps, device=DEVICE)
    coef_a = (abar[1:] / abar[:-1]).sqrt()
    coef_b = (1 - abar[1:]).sqrt() - coef_a * (1 - abar[:-1]).sqrt()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    noise = torch.randn(4, 1, 4, side, side, device=DEVICE, generator=gen).to(dt)
    label, null = torch.tensor([207], device=DEVICE), torch.tensor([1000], device=DEVICE)
    both = torch.cat([label, null])
    x_s, t_s, a_s, b_s = noise[0].clone(), ts[:1].clone(), coef_a[:1].clone(), coef_b[:1].clone()

    def denoise() -> None:  # one DDIM step on the static tensors, in place
        if args.variant == "cfg_batch":
            e_c, e_u = model(x_s.expand(2, -1, -1, -1), t_s.expand(2), both).chunk(2)
        else:
            e_c, e_u = model(x_s, t_s, label), model(x_s, t_s, null)
        x_s.copy_(a_s * x_s + b_s * (e_u + 4.0 * (e_c - e_u)))

    graph = None
    with torch.inference_mode():
        if args.variant == "cuda_graph" and CUDA:
            side_stream = torch.cuda.Stream()
            side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side_stream):
                for _ in range(3):
                    denoise()
            torch.cuda.current_stream().wait_stream(side_stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                denoise()
        check = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for i in range(args.steps):
            timer.tick()
            x_s.copy_(noise[i % 4])
            for s in range(steps):
                t_s.copy_(ts[s:s + 1]), a_s.copy_(coef_a[s:s + 1]), b_s.copy_(coef_b[s:s + 1])
                graph.replay() if graph is not None else denoise()
            check += x_s.float().abs().mean()
            timer.end()
    timer.report(f"dit_sampler variant={args.variant or 'baseline'} sample checksum {check.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
