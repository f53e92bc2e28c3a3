"""Conformer speech-encoder inference compiled with `backend="aot_eager"`, a debugging backend left in place: AOTAutograd traces the graph, then every op runs as an eager kernel.

The usual suspect: torch.compile. A Conformer-M-style CTC encoder (input projection 80 -> 256,
4 blocks of width 256: macaron half-step feed-forwards 256 -> 1024 -> 256 with SiLU,
4-head self-attention by SDPA (no relative positions), a convolution module (pointwise 256 -> 512,
GLU, depthwise Conv1d of kernel 31, BatchNorm, SiLU, pointwise 256 -> 256), LayerNorms; final
LayerNorm and a 1,024-token CTC head), bf16, inference mode; 64 utterances of 512 frames (after
subsampling) per step. Baseline: `torch.compile(model, backend="aot_eager")`: no fusion, ~45
kernels per block over (64 x 512 x 256) and (64 x 512 x 1024) activations. Variant `inductor`:
`torch.compile(model)` (the default backend: LayerNorm, SiLU, GLU, BatchNorm, scaling and residual
adds fused into Triton kernels; the set's one inductor compile, ~8–12 s cold).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("inductor",)
if CUDA:
    FEAT, WIDTH, HEADS, BLOCKS, KERNEL, VOCAB, BATCH, FRAMES = 80, 256, 4, 4, 31, 1024, 64, 512
else:
    FEAT, WIDTH, HEADS, BLOCKS, KERNEL, VOCAB, BATCH, FRAMES = 16, 32, 4, 2, 7, 64, 2, 24
DTYPE = torch.bfloat16 if CUDA else torch.float32


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(self.norm(x))))


class ConvModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.pw1, self.pw2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.dw = nn.Conv1d(WIDTH, WIDTH, KERNEL, padding=KERNEL // 2, groups=WIDTH)
        self.bn = nn.BatchNorm1d(WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pw1(self.norm(x)), dim=-1).transpose(1, 2)  # (B, C, T)
        y = F.silu(self.bn(self.dw(y))).transpose(1, 2)
        return self.pw2(y)


class ConformerBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ff1, self.ff2, self.conv = FeedForward(), FeedForward(), ConvModule()
        self.attn_norm, self.out_norm = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.o = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x = x + 0.5 * self.ff1(x)
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(FEAT, WIDTH)
        self.blocks = nn.ModuleList(ConformerBlock() for _ in range(BLOCKS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = self.proj(feats)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)).float().log_softmax(-1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = Encoder().to(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):  # trained-looking running statistics
                m.running_mean.normal_(0.0, 0.1, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)
            elif isinstance(m, nn.Linear):
                m.weight.normal_(0.0, 1.0 / math.sqrt(m.in_features), generator=gen)
    model = model.to(DTYPE).eval()
    if args.variant == "inductor":
        run = torch.compile(model)
    else:
        run = torch.compile(model, backend="aot_eager")
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            feats = torch.randn(BATCH, FRAMES, FEAT, device=DEVICE, generator=gen, dtype=DTYPE)
            logp = run(feats)
            total += logp.max(-1).values.double().mean()
            timer.end()
    timer.report(f"aot_eager_backend variant={args.variant or 'baseline'} mean best log-prob {total.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
