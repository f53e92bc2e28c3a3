"""Jet tagging with a Particle Flow Network whose shared per-particle layers `bmm` against a weight expanded per jet.

Training a Particle Flow Network (Komiske, Metodiev, Thaler) on JetClass-style jets (10 classes):
1,024 jets per step, each up to 64 particles (padded, masked) of 8 features; the per-particle map
Phi (8 -> 768 -> 768 -> 768 -> 256, ReLU) is shared by every particle of every jet, its outputs are
summed over the jet's particles, and F (256 -> 512 -> 512 -> 10) classifies the sum. fp32 weights,
bf16 autocast, fused AdamW.

Baseline: Phi's layers are written for a 3-D batch as `torch.bmm(h, w.unsqueeze(0).expand(B, -1,
-1)) + b`: 1,024 GEMMs of 64 rows each. Autocast's bf16 cast materialises the expanded weight (1.2 GB
per 768 x 768 layer, kept for the backward), and the backward produces a weight gradient per jet
(B x 768 x 768, bf16, then float32 through the cast's backward) that the expand's backward sums
over the jets: ~10 GB of traffic per wide layer around 64-row GEMMs.

Variant `flat_matmul`: `h @ w + b` (`torch.matmul` folds the jet and particle axes into one
65,536-row GEMM, as `nn.Linear` does); the weight gradient is one GEMM reduction. The same weights,
data and updates.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

NAME = "jet_tagging_expanded_weight_bmm"
VARIANTS = ("flat_matmul",)

if CUDA:
    JETS, PARTICLES, WIDTH, LATENT, HIDDEN = 1024, 64, 768, 256, 512
else:  # tiny check of the script on the CPU
    JETS, PARTICLES, WIDTH, LATENT, HIDDEN = 16, 8, 32, 16, 32
FEATURES, CLASSES, POOL = 8, 10, 4


class SharedLayer(nn.Module):
    """One per-particle layer of Phi, weight stored (in, out)."""

    def __init__(self, fan_in: int, fan_out: int, flat: bool) -> None:
        super().__init__()
        self.flat = flat
        self.w = nn.Parameter(torch.randn(fan_in, fan_out) * fan_in ** -0.5)
        self.b = nn.Parameter(torch.zeros(fan_out))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.flat:
            return h @ self.w + self.b
        return torch.bmm(h, self.w.unsqueeze(0).expand(h.shape[0], -1, -1)) + self.b


class PFN(nn.Module):
    def __init__(self, flat: bool) -> None:
        super().__init__()
        dims = (FEATURES, WIDTH, WIDTH, WIDTH, LATENT)
        self.phi = nn.ModuleList(SharedLayer(a, b, flat) for a, b in itertools.pairwise(dims))
        self.f = nn.Sequential(nn.Linear(LATENT, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                               nn.Linear(HIDDEN, CLASSES))

    def forward(self, particles: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = particles
        for layer in self.phi:
            h = F.relu(layer(h))
        return self.f((h * mask.unsqueeze(-1)).sum(1))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = PFN(flat=args.variant == "flat_matmul")
    opt = adamw(list(model.parameters()))

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    counts = torch.randint(PARTICLES // 4, PARTICLES + 1, (POOL, JETS, 1), generator=gen, device=DEVICE)
    mask = (torch.arange(PARTICLES, device=DEVICE) < counts).to(torch.float32)
    particles = torch.randn(POOL, JETS, PARTICLES, FEATURES, generator=gen, device=DEVICE) * mask.unsqueeze(-1)
    labels = torch.randint(0, CLASSES, (POOL, JETS), generator=gen, device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        r = i % POOL
        with bf16():
            logits = model(particles[r], mask[r])
        return F.cross_entropy(logits.float(), labels[r])

    train(NAME, args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
