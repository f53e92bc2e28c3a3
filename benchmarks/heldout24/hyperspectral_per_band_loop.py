"""Hyperspectral crop mapping: raw sensor counts calibrated and standardised band by band in a Python loop before a small CNN.

Training a patch classifier on AVIRIS-style imagery (200 spectral bands, 16 crop classes, 512
patches of 27 x 27 pixels per step, 12-bit counts in int16): calibration to radiance with a per-band
gain and offset, a floor, a log transform and per-band standardisation, then a spectral 1 x 1
convolution to 64 channels, two 3 x 3 convolutions, pooling and a classifier (bf16 autocast,
fused AdamW).
Baseline: the preprocessing loops over the 200 bands, `for c in range(200): x[:, c] = ...`, each band
a slice of 373 k values going through 8 small kernels (cast, gain, offset, floor, log, mean,
std, store): 1,600 launches per step, each a few microseconds of GPU work, before the CNN's ~1 ms.
Variant `broadcast_bands`: the same operations once on the whole (512, 200, 27, 27) batch, the
per-band constants broadcast as (200, 1, 1) tensors: 7 kernels, bit-identical values.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("broadcast_bands",)
PATCHES, BANDS, SIDE, CLASSES = (512, 200, 27, 16) if CUDA else (4, 20, 9, 16)


Tensor = torch.Tensor


def calibrate_loop(raw: Tensor, gain: Tensor, offset: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    x = torch.empty(raw.shape, device=raw.device, dtype=torch.float32)
    for c in range(raw.shape[1]):
        radiance = raw[:, c].float() * gain[c] + offset[c]
        x[:, c] = (radiance.clamp(min=1e-4).log() - mean[c]) / std[c]
    return x


def calibrate_broadcast(raw: Tensor, gain: Tensor, offset: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    def per_band(v: torch.Tensor) -> torch.Tensor:
        return v.view(-1, 1, 1)

    radiance = raw.float() * per_band(gain) + per_band(offset)
    return (radiance.clamp(min=1e-4).log() - per_band(mean)) / per_band(std)


class CropNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.spectral = nn.Conv2d(BANDS, 64, 1)
        self.c1 = nn.Conv2d(64, 128, 3, padding=1)
        self.c2 = nn.Conv2d(128, 128, 3, padding=1)
        self.head = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.spectral(x))
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return self.head(x.mean((2, 3)))


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = CropNet()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    gain = 0.01 + 0.02 * torch.rand(BANDS, generator=gen, device=DEVICE)
    offset = torch.randn(BANDS, generator=gen, device=DEVICE)
    mean = 2.0 + 0.5 * torch.rand(BANDS, generator=gen, device=DEVICE)
    std = 0.5 + 0.5 * torch.rand(BANDS, generator=gen, device=DEVICE)
    batches = [(torch.randint(0, 4096, (PATCHES, BANDS, SIDE, SIDE), generator=gen, device=DEVICE, dtype=torch.int16),
                torch.randint(0, CLASSES, (PATCHES,), generator=gen, device=DEVICE)) for _ in range(3)]
    calibrate = calibrate_broadcast if args.variant == "broadcast_bands" else calibrate_loop
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        raw, labels = batches[i % len(batches)]
        x = calibrate(raw, gain, offset, mean, std)
        with bf16():
            return F.cross_entropy(model(x).float(), labels)

    train("hyperspectral_per_band_loop", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
