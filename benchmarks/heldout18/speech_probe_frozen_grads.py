"""Linear probe of a frozen wav2vec-style speech encoder for 35 spoken commands: the encoder is
"frozen" only by leaving its parameters out of the optimizer, so backward still runs through the
whole encoder and accumulates its weight gradients every step.

Baseline: `adamw(head.parameters())` while the encoder keeps `requires_grad=True`: autograd saves the
encoder's activations, back-propagates through its 12 blocks and 7 convolutions and adds into 85 M
unused `.grad` values per step. Variant `frozen_no_grad`: `encoder.requires_grad_(False)` and the
encoder's forward under `torch.no_grad()`, so backward covers only the head. Same losses and
updates (the head's gradients do not depend on the encoder's)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train

# GPU: 32 clips x 4 s at 16 kHz -> 200 frames, width 768, 12 blocks; CPU: a tiny check
B, SAMPLES, CH, DIM, HEADS, LAYERS = (32, 64000, 512, 768, 12, 12) if CUDA else (4, 3200, 32, 64, 4, 2)
CLASSES, BATCHES = 35, 4


class SpeechEncoder(nn.Module):
    """Conv feature extractor (strides 5, 2, 2, 2, 2, 2, 2 -> 320x) then pre-norm transformer blocks."""

    def __init__(self) -> None:
        super().__init__()
        specs = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
        self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else CH, CH, k, s, bias=False) for i, (k, s) in enumerate(specs))
        self.norm0 = nn.GroupNorm(CH, CH)
        self.proj = nn.Linear(CH, DIM)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(LAYERS))
        self.out_norm = nn.LayerNorm(DIM)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        x = wav[:, None]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = F.gelu(self.norm0(x) if i == 0 else x)
        x = self.proj(x.transpose(1, 2))
        for blk in self.blocks:
            x = blk(x, F.scaled_dot_product_attention)
        return self.out_norm(x)


def main() -> None:
    args = options(__doc__ or "", ("frozen_no_grad",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        enc = SpeechEncoder().eval()  # "pretrained", no dropout anywhere
        head = nn.Sequential(nn.Linear(DIM, 256), nn.GELU(), nn.Linear(256, CLASSES))
        gen = torch.Generator(DEVICE).manual_seed(1)
        wavs = torch.randn(BATCHES, B, SAMPLES, generator=gen) * 0.1
        labels = torch.randint(0, CLASSES, (BATCHES, B), generator=gen)
    frozen = args.variant == "frozen_no_grad"
    if frozen:
        enc.requires_grad_(False)
    opt = adamw(list(head.parameters()))  # only the head is trained, in both

    def loss_of(i: int) -> torch.Tensor:
        wav, y = wavs[i % BATCHES], labels[i % BATCHES]
        with bf16():
            if frozen:
                with torch.no_grad():
                    feats = enc(wav)
            else:
                feats = enc(wav)
            logits = head(feats.mean(dim=1))
        return F.cross_entropy(logits.float(), y)

    train("speech_probe_frozen_grads", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
