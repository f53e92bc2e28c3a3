"""Latent-diffusion fine-tuning whose frozen VAE encoder runs again on every step's images.

Workload: class-conditional fine-tuning of a latent-diffusion UNet the way CompVis' `LatentDiffusion`
and diffusers' `train_text_to_image.py` train it: a GPU-resident pool of 32 uint8 images of 256 x 256,
8 per step, each step encoded by the frozen Stable-Diffusion-style `AutoencoderKL` encoder (conv_in
to 128, four levels of two ResNet blocks at 128 / 256 / 512 / 512 channels with GroupNorm(32) and SiLU,
a mid block with single-head attention at 32 x 32, 8 output channels for the mean and log-variance;
34M bf16 weights, eval mode, `torch.no_grad()`), a latent sampled from that distribution and scaled by
0.18215, noise added at a random DDPM timestep (scaled-linear betas, 1,000 steps), and the UNet
(LDM layout: 256 / 512 / 1,024 channels at 32 / 16 / 8, two ResNet blocks per level going down and
three coming up, 8-head self-attention at 16 and 8, time and class embeddings of 1,024; 257M weights,
0.57 TFLOP forward per step) trained on the epsilon MSE under bf16 autocast with fused AdamW. The VAE
encoder's 2.2 TFLOP per step (0.27 per 256 x 256 image) repeat, every step, the same forward over
images whose latent distribution never changes.

Variant `cache_latents`: the latent distributions (mean and log-variance) of the pool are computed
once at start-up, in the same batches of 8 (kohya's `--cache_latents`, diffusers' DreamBooth
`--cache_latents`), and each step samples its latent from the cached distribution with the same
generator draw: the same latents, noise and losses.

Variant `compiled` (extra, timed but not recorded): the baseline with the UNet and the VAE encoder
each wrapped in `torch.compile` (default mode).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    IMG, BATCH, POOL, CLASSES, GROUPS = 256, 8, 32, 1000, 32
    VAE_CH, VAE_MULT = 128, (1, 2, 4, 4)
    UNET_CH, UNET_MULT, UNET_ATTN, HEADS = 256, (1, 2, 4), (False, True, True), 8
else:
    IMG, BATCH, POOL, CLASSES, GROUPS = 32, 2, 4, 10, 8
    VAE_CH, VAE_MULT = 16, (1, 2)
    UNET_CH, UNET_MULT, UNET_ATTN, HEADS = 32, (1, 2), (False, True), 2
LATENT, SCALE, T_STEPS = 4, 0.18215, 1000
DTYPE = torch.bfloat16 if CUDA else torch.float32


def norm(ch: int) -> nn.GroupNorm:
    return nn.GroupNorm(GROUPS, ch, eps=1e-6)


class ResnetBlock(nn.Module):
    """GroupNorm, SiLU, 3x3 conv, twice, with a 1x1 skip where the width changes; `emb` adds a per-channel
    time embedding after the first conv (the UNet's blocks; the VAE's have none)."""

    def __init__(self, cin: int, cout: int, emb: int = 0) -> None:
        super().__init__()
        self.norm1, self.conv1 = norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(emb, cout) if emb else None
        self.norm2, self.conv2 = norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        if self.emb is not None and emb is not None:
            h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class SpatialAttention(nn.Module):
    """GroupNorm, q/k/v over the flattened pixels, multi-head SDPA, projection, residual."""

    def __init__(self, ch: int, heads: int) -> None:
        super().__init__()
        self.heads, self.norm = heads, norm(ch)
        self.qkv, self.proj = nn.Linear(ch, 3 * ch), nn.Linear(ch, ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).view(b, h * w, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, h * w, c)
        return x + self.proj(a).transpose(1, 2).reshape(b, c, h, w)


class VAEEncoder(nn.Module):
    """`AutoencoderKL`'s encoder and quant_conv: image in [-1, 1] -> (mean, logvar) at 1/8 resolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, VAE_CH, 3, padding=1)
        self.blocks = nn.ModuleList()
        ch = VAE_CH
        for i, mult in enumerate(VAE_MULT):
            for _ in range(2):
                self.blocks.append(ResnetBlock(ch, VAE_CH * mult))
                ch = VAE_CH * mult
            if i != len(VAE_MULT) - 1:
                self.blocks.append(nn.Conv2d(ch, ch, 3, stride=2))  # SD pads (0, 1, 0, 1) first
        self.mid1, self.mid_attn, self.mid2 = ResnetBlock(ch, ch), SpatialAttention(ch, 1), ResnetBlock(ch, ch)
        self.norm_out, self.conv_out = norm(ch), nn.Conv2d(ch, 2 * LATENT, 3, padding=1)
        self.quant_conv = nn.Conv2d(2 * LATENT, 2 * LATENT, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.conv_in(x)
        for block in self.blocks:
            h = block(F.pad(h, (0, 1, 0, 1))) if isinstance(block, nn.Conv2d) else block(h)
        h = self.mid2(self.mid_attn(self.mid1(h)))
        moments = self.quant_conv(self.conv_out(F.silu(self.norm_out(h))))
        mean, logvar = moments.chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)


class UNet(nn.Module):
    """LDM-style UNet: input blocks (ResNet + optional attention, downsampling), a mid block, output
    blocks that concatenate the skips, time and class embeddings added in every ResNet block."""

    def __init__(self) -> None:
        super().__init__()
        emb = 4 * UNET_CH
        self.time_mlp = nn.Sequential(nn.Linear(UNET_CH, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.class_emb = nn.Embedding(CLASSES, emb)
        self.conv_in = nn.Conv2d(LATENT, UNET_CH, 3, padding=1)
        self.down = nn.ModuleList()
        skips, ch = [UNET_CH], UNET_CH
        for i, (mult, attn) in enumerate(zip(UNET_MULT, UNET_ATTN, strict=True)):
            for _ in range(2):
                self.down.append(nn.ModuleList([ResnetBlock(ch, UNET_CH * mult, emb),
                                                SpatialAttention(UNET_CH * mult, HEADS) if attn else nn.Identity()]))
                ch = UNET_CH * mult
                skips.append(ch)
            if i != len(UNET_MULT) - 1:
                self.down.append(nn.ModuleList([nn.Conv2d(ch, ch, 3, stride=2, padding=1)]))
                skips.append(ch)
        self.mid = nn.ModuleList([ResnetBlock(ch, ch, emb), SpatialAttention(ch, HEADS), ResnetBlock(ch, ch, emb)])
        self.up = nn.ModuleList()
        for i, (mult, attn) in reversed(list(enumerate(zip(UNET_MULT, UNET_ATTN, strict=True)))):
            for j in range(3):
                layers: list[nn.Module] = [ResnetBlock(ch + skips.pop(), UNET_CH * mult, emb),
                                           SpatialAttention(UNET_CH * mult, HEADS) if attn else nn.Identity()]
                ch = UNET_CH * mult
                if i != 0 and j == 2:
                    layers.append(nn.Conv2d(ch, ch, 3, padding=1))  # after a nearest x2 upsample
                self.up.append(nn.ModuleList(layers))
        self.norm_out, self.conv_out = norm(ch), nn.Conv2d(ch, LATENT, 3, padding=1)

    def forward(self, z: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        half = UNET_CH // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=z.device, dtype=torch.float32) / half)
        args = t.float()[:, None] * freqs[None]
        emb = self.time_mlp(torch.cat([torch.cos(args), torch.sin(args)], -1)) + self.class_emb(labels)
        h = self.conv_in(z)
        hs = [h]
        for layers in self.down:
            h = layers[0](h) if len(layers) == 1 else layers[1](layers[0](h, emb))  # downsample, or ResNet + attention
            hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, emb)), emb)
        for layers in self.up:
            h = layers[1](layers[0](torch.cat([h, hs.pop()], 1), emb))
            if len(layers) == 3:
                h = layers[2](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h)))


def main() -> None:
    args = options(__doc__, ("cache_latents", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        vae = VAEEncoder().to(DTYPE).eval().requires_grad_(False)
        unet = UNet()
    encode = torch.compile(vae) if args.variant == "compiled" else vae
    net = torch.compile(unet) if args.variant == "compiled" else unet
    opt = adamw(list(unet.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, IMG, IMG), dtype=torch.uint8, device=DEVICE, generator=gen)
    pool_labels = torch.randint(0, CLASSES, (POOL,), device=DEVICE, generator=gen)
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, T_STEPS, device=DEVICE, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1.0 - betas, 0).float()

    def distribution(first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The VAE's latent distribution of pool images first .. first + BATCH - 1."""
        with torch.no_grad():
            x = (pool[first:first + BATCH].to(DTYPE) / 127.5 - 1.0)
            return encode(x)

    cache = [distribution(first) for first in range(0, POOL, BATCH)] if args.variant == "cache_latents" else []

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    latent_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for step in range(args.steps):
        timer.tick()
        first = (step * BATCH) % POOL
        mean, logvar = cache[first // BATCH] if cache else distribution(first)
        eps_z = torch.randn(mean.shape, device=DEVICE, generator=gen, dtype=torch.float32)
        z = (mean.float() + torch.exp(0.5 * logvar.float()) * eps_z) * SCALE  # latent_dist.sample() * scale
        t = torch.randint(0, T_STEPS, (BATCH,), device=DEVICE, generator=gen)
        noise = torch.randn(z.shape, device=DEVICE, generator=gen)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        noisy = a.sqrt() * z + (1.0 - a).sqrt() * noise
        with bf16():
            pred = net(noisy, t, pool_labels[first:first + BATCH])
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        latent_sum += z.double().sum()
        timer.end()
    timer.report(f"ldm_vae_encode_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"latent checksum {latent_sum.item():.4f}")


if __name__ == "__main__":
    main()
