"""Radar precipitation-nowcasting U-Net trained in float64 because the numpy data were float64.

A nowcasting U-Net (4 past radar frames in, the next frame out; 224 x 224 crops; four levels of
two 3 x 3 convolutions with BatchNorm and ReLU, widths 32-64-128-256 and a 512-wide bottleneck,
transposed-convolution upsampling with skips; MAE loss; fused AdamW; batch 4) whose reflectivity
archive is a numpy array, float64 as numpy makes it. `torch.from_numpy` keeps the float64, the
first forward fails with "expected scalar type Double but found Float", and the script was made
to run the way many forum answers suggest: `model.double()`. Every convolution, BatchNorm, the
loss and the optimizer then run in double precision, where cuDNN has no tensor-core kernels and
every activation is twice the bytes.

  baseline          `model.double()`, batches `torch.from_numpy(...)` (float64)
  --variant float32     the model left in float32, batches converted with `.float()` before the copy

Same weights (built in float32, so `.double()` is exact) and data; the results differ by the
precision itself (float32 with cuDNN's default TF32 convolutions vs float64).
"""

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn

FRAMES_IN = 4
if CUDA:
    BATCH, SIZE, WIDTHS, ARCHIVE = 4, 224, (32, 64, 128, 256, 512), 48
else:
    BATCH, SIZE, WIDTHS, ARCHIVE = 2, 32, (4, 8, 8, 16, 16), 12


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class NowcastUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = WIDTHS
        self.downs = nn.ModuleList([double_conv(FRAMES_IN, w[0])] + [double_conv(w[i], w[i + 1]) for i in range(3)])
        self.bottom = double_conv(w[3], w[4])
        self.ups = nn.ModuleList(nn.ConvTranspose2d(w[i + 1], w[i], 2, 2) for i in reversed(range(4)))
        self.dec = nn.ModuleList(double_conv(2 * w[i], w[i]) for i in reversed(range(4)))
        self.out = nn.Conv2d(w[0], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, dec, skip in zip(self.ups, self.dec, reversed(skips), strict=True):
            x = dec(torch.cat([up(x), skip], 1))
        return self.out(x)


def radar_archive() -> np.ndarray:
    """(ARCHIVE, SIZE, SIZE) float64 reflectivity frames in [0, 1]: smooth storm cells advected by a steady wind."""
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    cells = rng.uniform(0, SIZE, (24, 2))
    radii = rng.uniform(SIZE / 40, SIZE / 10, 24)
    power = rng.uniform(0.3, 1.0, 24)
    wind = np.array([1.3, 0.7]) * SIZE / 256
    frames = np.zeros((ARCHIVE, SIZE, SIZE))
    for t in range(ARCHIVE):
        for (cy, cx), r, p in zip(cells, radii, power, strict=True):
            cy, cx = (cy + wind[0] * t) % SIZE, (cx + wind[1] * t) % SIZE
            frames[t] += p * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r)) * (1 + 0.1 * np.sin(0.3 * t + r))
    frames += 0.02 * rng.standard_normal(frames.shape)
    return np.clip(frames, 0.0, 1.0)


def main() -> None:
    args = options(__doc__, ("float32",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = NowcastUNet()
    if args.variant != "float32":
        model = model.double()  # "expected scalar type Double but found Float" -> make the model double
    opt = adamw(list(model.parameters()))
    archive = radar_archive()
    starts = np.random.default_rng(2).integers(0, ARCHIVE - FRAMES_IN, (args.steps, BATCH))

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        clips = np.stack([archive[s:s + FRAMES_IN + 1] for s in starts[i]])  # (B, 5, H, W) float64
        batch = torch.from_numpy(clips)
        if args.variant == "float32":
            batch = batch.float()
        batch = batch.to(DEVICE)
        x, y = batch[:, :FRAMES_IN], batch[:, FRAMES_IN:]
        loss = F.l1_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"nowcast_unet_float64 variant={args.variant or 'baseline'} mean mae {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
