"""Rooftop solar-panel segmentation (a UNet on aerial tiles) whose loop calls `torch.cuda.empty_cache()` every step.

Training a UNet (4 levels, 32 -> 256 channels and a 512-channel bottleneck, Conv-BatchNorm-ReLU
blocks, transposed-convolution upsampling, skip concatenations; channels_last, bf16 autocast,
fused AdamW) to mark solar panels on 512 x 512 aerial tiles (16 tiles per step, RGB uint8, binary
masks), with a BCE-with-logits loss. The batches come from a pool of 4 pre-loaded batches, revisited
in turn.

Baseline: the loop ends every step with `torch.cuda.empty_cache()` ("free the cache between steps
so the next batch does not run out of memory", a habit copied from notebooks). The caching
allocator hands all of its unused segments back to the driver (`cudaFree`, which waits for the
GPU), so the next forward gets every activation (about 70 tensors of 17-270 MB, 5-7 GB per step)
from fresh `cudaMalloc` calls again, and cuDNN's workspaces too.

Variant `keep_allocator_cache`: no `empty_cache()`: from the second step on, every allocation is
served from the allocator's cached segments. The same batches, weights, kernels and updates.
"""

import itertools

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("keep_allocator_cache",)
if CUDA:
    BATCH, SIDE, WIDTHS = 16, 512, (32, 64, 128, 256)
else:  # a tiny CPU check of the script
    BATCH, SIDE, WIDTHS = 2, 64, (8, 16, 32, 64)
POOL = 4


def conv_block(cin: int, cout: int) -> nn.Sequential:
    """Two 3 x 3 Conv-BatchNorm-ReLU layers (no conv bias before BatchNorm)."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class UNet(nn.Module):
    """The classic encoder-decoder with skip connections; one logit per pixel."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        chans = (3, *widths)
        self.down = nn.ModuleList(conv_block(a, b) for a, b in itertools.pairwise(chans))
        self.bottom = conv_block(widths[-1], 2 * widths[-1])
        ups = (2 * widths[-1], *reversed(widths))
        self.up = nn.ModuleList(nn.ConvTranspose2d(a, b, 2, stride=2) for a, b in itertools.pairwise(ups))
        self.dec = nn.ModuleList(conv_block(2 * b, b) for b in reversed(widths))
        self.head = nn.Conv2d(widths[0], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips), strict=True):
            x = dec(torch.cat([up(x), skip], 1))
        return self.head(x)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = UNet(WIDTHS).to(memory_format=torch.channels_last)
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # the pre-loaded pool: uint8 RGB tiles and their panel masks (blobs from smoothed noise)
    tiles = torch.randint(0, 256, (POOL, BATCH, 3, SIDE, SIDE), generator=gen, device=DEVICE, dtype=torch.uint8)
    noise = torch.rand(POOL * BATCH, 1, SIDE // 16, SIDE // 16, generator=gen, device=DEVICE)
    masks = (F.interpolate(noise, size=(SIDE, SIDE), mode="bilinear") > 0.7).float().view(POOL, BATCH, 1, SIDE, SIDE)
    mean = torch.tensor([0.40, 0.42, 0.38], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.20, 0.19, 0.21], device=DEVICE).view(1, 3, 1, 1) * 255

    def loss_of(i: int) -> torch.Tensor:
        x = ((tiles[i % POOL].float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with bf16():
            logits = model(x)
        return F.binary_cross_entropy_with_logits(logits.float(), masks[i % POOL])

    def release_cache(loss: torch.Tensor) -> None:
        # "free the cached memory between steps" (baseline)
        torch.cuda.empty_cache()

    model.train()
    train("rooftop_solar_unet_empty_cache", args.variant, args.steps, opt, loss_of,
          after=None if args.variant == "keep_allocator_cache" else release_cache)


if __name__ == "__main__":
    main()
