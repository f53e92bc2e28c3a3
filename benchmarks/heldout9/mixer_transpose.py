"""MLP-Mixer training whose token-mixing MLP runs on transposed activations (`x.transpose(1, 2)` into and out of `nn.Linear`).

Baseline: MLP-Mixer-S/16 style (patch embedding Conv2d 3 -> 512, 16 x 16 patches of 224 x 224 images:
196 tokens; 8 blocks of token mixing (LayerNorm, Linear 196 -> 256, GELU, Linear 256 -> 196 across
tokens) and channel mixing (LayerNorm, Linear 512 -> 2048, GELU, Linear 2048 -> 512); LayerNorm,
mean pool, 1000 classes), batch 64, bf16 autocast, fused AdamW. The token MLP is written the common
way, `x + mlp(norm(x).transpose(1, 2)).transpose(1, 2)`: the (64, 512, 196) view is not foldable into
a GEMM operand, so `nn.Linear` copies it (a transposing copy), the output comes back as a
transposed view that the residual add reads with a 196-element stride, and backward repeats both
for the gradients. Variant `token_matmul`: the same weights applied along the token axis without
any transpose, `W2 @ gelu(W1 @ norm(x) + b1) + b2` as batched matmuls on the contiguous
(64, 196, 512) activations.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer, adamw, bf16 = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer", "adamw", "bf16"))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, tok_hidden: int, ch_hidden: int, matmul: bool) -> None:
        super().__init__()
        self.matmul = matmul
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok1, self.tok2 = nn.Linear(tokens, tok_hidden), nn.Linear(tok_hidden, tokens)
        self.ch1, self.ch2 = nn.Linear(dim, ch_hidden), nn.Linear(ch_hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)  # (B, N, C)
        if self.matmul:  # mix along N with the token weights on the left: no transpose anywhere
            h = torch.matmul(self.tok1.weight, y)  # (B, hidden, C); bias in the GEMM's dtype, as F.linear's
            h = F.gelu(h + self.tok1.bias.to(h.dtype)[:, None])
            t = torch.matmul(self.tok2.weight, h)
            x = x + (t + self.tok2.bias.to(t.dtype)[:, None])
        else:
            x = x + self.tok2(F.gelu(self.tok1(y.transpose(1, 2)))).transpose(1, 2)
        return x + self.ch2(F.gelu(self.ch1(self.norm2(x))))


class Mixer(nn.Module):
    def __init__(self, side: int, patch: int, dim: int, tok_hidden: int, ch_hidden: int, depth: int, classes: int, matmul: bool) -> None:
        super().__init__()
        tokens = (side // patch) ** 2
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.ModuleList(MixerBlock(tokens, dim, tok_hidden, ch_hidden, matmul) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.stem(img).flatten(2).transpose(1, 2).contiguous()  # (B, N, C)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(1))


def main() -> None:
    args = options(__doc__, ("token_matmul",)).parse_args()
    torch.manual_seed(0)
    # GPU: 64 images of 224 x 224 (196 tokens), width 512, 8 blocks; CPU check: 2 images of 32 x 32 (16 tokens), width 32
    batch, side, patch, dim, tok_h, ch_h, depth, classes = (64, 224, 16, 512, 256, 2048, 8, 1000) if CUDA else (2, 32, 8, 32, 24, 64, 2, 10)
    model = Mixer(side, patch, dim, tok_h, ch_h, depth, classes, args.variant == "token_matmul").to(DEVICE)
    opt = adamw(list(model.parameters()))
    g = torch.Generator(device=DEVICE).manual_seed(1)
    data = [(torch.randn(batch, 3, side, side, device=DEVICE, generator=g),
             torch.randint(0, classes, (batch,), device=DEVICE, generator=g)) for _ in range(2)]

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        img, y = data[i % 2]
        with bf16():
            loss = F.cross_entropy(model(img).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"mixer_transpose variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
