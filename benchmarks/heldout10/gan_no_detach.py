"""DCGAN training whose discriminator step back-propagates into the generator (fakes not detached) and whose generator step generates the fakes again.

The usual suspect: the training loop. A DCGAN (64 x 64 images, latent 128, generator width
ngf = 128 with BatchNorm, discriminator width ndf = 64 with LeakyReLU, no normalisation), batch 512,
bf16 autocast, channels_last, fused Adam (lr 2e-4, betas 0.5/0.999) for each network.
Baseline: `d_loss = bce(D(real), 1) + bce(D(G(z)), 0)` with the fakes not detached, so
`d_loss.backward()` runs the generator's whole backward (weight and input gradients, cleared
unused by the generator step's `zero_grad`), then the generator step calls `G(z)` again.
Variant `reuse_fake`: one `fake = G(z)`; the discriminator step uses `fake.detach()`, the generator
step reuses `fake` (the same values: G's weights do not change between the two calls, and
train-mode BatchNorm normalises with the batch's own statistics).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

VARIANTS = ("reuse_fake",)
if CUDA:
    BATCH, NZ, NGF, NDF, POOL = 512, 128, 128, 64, 4096
else:
    BATCH, NZ, NGF, NDF, POOL = 8, 16, 16, 8, 32


def generator() -> nn.Module:
    def up(i: int, o: int) -> list[nn.Module]:
        return [nn.ConvTranspose2d(i, o, 4, 2, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(True)]

    return nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 8), nn.ReLU(True),  # 4 x 4
        *up(NGF * 8, NGF * 4), *up(NGF * 4, NGF * 2), *up(NGF * 2, NGF),  # 8, 16, 32
        nn.ConvTranspose2d(NGF, 3, 4, 2, 1, bias=False), nn.Tanh())  # 64 x 64


def discriminator() -> nn.Module:
    def down(i: int, o: int) -> list[nn.Module]:
        return [nn.Conv2d(i, o, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]

    return nn.Sequential(*down(3, NDF), *down(NDF, NDF * 2), *down(NDF * 2, NDF * 4), *down(NDF * 4, NDF * 8),
                         nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False), nn.Flatten())


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    fmt = torch.channels_last if CUDA else torch.contiguous_format
    g_net, d_net = generator().to(DEVICE, memory_format=fmt), discriminator().to(DEVICE, memory_format=fmt)
    for m in [*g_net.modules(), *d_net.modules()]:
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    # "real" images: smooth random patterns in [-1, 1], upsampled from 8 x 8 noise
    low = torch.randn(POOL, 3, 8, 8, device=DEVICE, generator=gen)
    real_pool = torch.tanh(F.interpolate(low, size=64, mode="bilinear", align_corners=False)).contiguous(memory_format=fmt)
    fused = {"fused": True} if CUDA else {}
    opt_g = torch.optim.Adam(g_net.parameters(), lr=2e-4, betas=(0.5, 0.999), **fused)
    opt_d = torch.optim.Adam(d_net.parameters(), lr=2e-4, betas=(0.5, 0.999), **fused)
    ones = torch.ones(BATCH, 1, device=DEVICE)
    zeros = torch.zeros(BATCH, 1, device=DEVICE)
    bce = F.binary_cross_entropy_with_logits
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        start = (i * BATCH) % POOL
        real = real_pool[start:start + BATCH]
        z = torch.randn(BATCH, NZ, 1, 1, device=DEVICE, generator=gen)
        # discriminator step
        opt_d.zero_grad(set_to_none=True)
        with bf16():
            fake = g_net(z)
            d_fake_in = fake.detach() if args.variant == "reuse_fake" else fake
            d_loss = bce(d_net(real).float(), ones) + bce(d_net(d_fake_in).float(), zeros)
        d_loss.backward()
        opt_d.step()
        # generator step
        opt_g.zero_grad(set_to_none=True)
        with bf16():
            if args.variant != "reuse_fake":
                fake = g_net(z)
            g_loss = bce(d_net(fake).float(), ones)
        g_loss.backward()
        opt_g.step()
        total += d_loss.detach() + g_loss.detach()
        del fake, d_fake_in, d_loss, g_loss
        timer.end()
    timer.report(f"gan_no_detach variant={args.variant or 'baseline'} mean d+g loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
