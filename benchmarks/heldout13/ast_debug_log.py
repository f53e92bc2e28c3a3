"""A compiled audio tagger whose blocks keep a debug log line with an f-string that calls `.item()`.

Workload: an AST-style audio spectrogram transformer used for tagging, inference: 128-band log-mel
fbank of 1,024 frames, 16 x 16 patches (512) from a Conv2d, class and distillation tokens, learned
positions, 6 pre-norm blocks of width 768 (12 heads of 64, GELU MLP 3072), the two tokens' mean,
LayerNorm, Linear to 527 AudioSet classes and a sigmoid; bf16 weights, `torch.inference_mode()`,
16 batches of 4 clips per step; the model is wrapped in `torch.compile(model)`. Each block ends with
`logger.debug(f"block {i}: max |x| {x.abs().max().item():.2f}")`, left from debugging: the logger
is at WARNING so nothing is printed, but the f-string is built first, so every block ends with a
`.item()` (a graph break in the compiled model and a device-to-host read).

Variant `log_flag`: the blocks are `QuietBlock`s, whose debug line sits behind
`if self.log_activations:`, a flag read once from `logger.isEnabledFor(logging.DEBUG)` when the block
is built (False here), so the compiled forward is one graph; the model computes the same scores.
"""

import logging

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

logger = logging.getLogger("audio_tagger")

if CUDA:
    MELS, FRAMES, PATCH, DIM, HEADS, DEPTH, CLASSES, CLIPS, CALLS = 128, 1024, 16, 768, 12, 6, 527, 4, 16
else:
    MELS, FRAMES, PATCH, DIM, HEADS, DEPTH, CLASSES, CLIPS, CALLS = 32, 64, 16, 64, 4, 2, 527, 2, 3
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Block(nn.Module):
    """Pre-norm transformer block (fused qkv, SDPA, GELU MLP)."""

    def __init__(self, index: int, dim: int, heads: int) -> None:
        super().__init__()
        self.index, self.heads = index, heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        self.trace(x)
        return x

    def trace(self, x: torch.Tensor) -> None:
        logger.debug(f"block {self.index}: max |x| {x.abs().max().item():.2f}")


class QuietBlock(Block):
    """The same block; its debug line is built only if DEBUG logging was on when it was made."""

    def __init__(self, index: int, dim: int, heads: int) -> None:
        super().__init__(index, dim, heads)
        self.log_activations = logger.isEnabledFor(logging.DEBUG)

    def trace(self, x: torch.Tensor) -> None:
        if self.log_activations:
            super().trace(x)


class AudioTagger(nn.Module):
    """Patch embedding of the fbank, two summary tokens, blocks, multi-label head."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, DIM, PATCH, stride=PATCH)
        n = (MELS // PATCH) * (FRAMES // PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.dist_token = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 2, DIM) * 0.02)
        block = QuietBlock if quiet else Block
        self.blocks = nn.ModuleList(block(i, DIM, HEADS) for i in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        x = self.patch(fbank.unsqueeze(1).transpose(2, 3)).flatten(2).transpose(1, 2)
        b = x.shape[0]
        x = torch.cat([self.cls_token.expand(b, -1, -1), self.dist_token.expand(b, -1, -1), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return torch.sigmoid(self.head((x[:, 0] + x[:, 1]) / 2))


def main() -> None:
    args = options(__doc__, ("log_flag",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = AudioTagger(quiet=args.variant == "log_flag").to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    # fbank features normalised as AST does: (x - mean) / (2 * std) with the dataset's statistics
    raw = torch.randn(CALLS, CLIPS, FRAMES, MELS, device=DEVICE, generator=gen) * 4.3 - 4.27
    batches = ((raw + 4.27) / (2 * 4.57)).to(DTYPE)
    tagger = torch.compile(model)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            for i in range(CALLS):
                total += tagger(batches[i]).float().mean()
            timer.end()
    timer.report(f"ast_debug_log variant={args.variant or 'baseline'} mean score {total.item() / (args.steps * CALLS):.5f}")


if __name__ == "__main__":
    main()
