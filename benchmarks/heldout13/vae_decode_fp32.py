"""Latent-diffusion VAE decoding kept in float32 (the `force_upcast` habit) where bf16 would do.

Workload: the image-decoding stage of a latent-diffusion pipeline: a Stable-Diffusion-style
`AutoencoderKL` decoder (post-quant 1x1 conv, conv_in to 512 channels, a mid block of two ResNet
blocks around single-head self-attention at 64 x 64, four up blocks of three ResNet blocks each at
512 / 512 / 256 / 128 channels with nearest x2 upsampling and a 3x3 conv between them, GroupNorm(32)
and SiLU throughout, conv_out to RGB), inference, 2 latents of 4 x 64 x 64 -> 2 images of 512 x 512
per step (`latents / 0.18215`, decode, `(x / 2 + 0.5).clamp(0, 1)`). The VAE is kept in float32, NCHW,
as pipelines do when the VAE config says `force_upcast` (fp16 overflowed in it); float32 convolutions
run as TF32 (cuDNN's default).

Variant `bf16`: the VAE and the latents in bfloat16 (bf16 has float32's range, so nothing overflows);
the decoded images are cast back to float32.

Variant `compiled` (added after the first GPU run, to measure that run's first suggestion):
the float32 decoder under `torch.compile` (default mode), nothing else changed.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    LATENT, CHANNELS, GROUPS, BATCH = 64, (128, 256, 512, 512), 32, 2
else:
    LATENT, CHANNELS, GROUPS, BATCH = 8, (16, 16, 32, 32), 8, 1
SCALING = 0.18215


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(GROUPS, cin, eps=1e-6), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(GROUPS, cout, eps=1e-6), nn.Conv2d(cout, cout, 3, padding=1)
        self.shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.shortcut(x) + h


class AttnBlock(nn.Module):
    """Single-head spatial self-attention with a GroupNorm in front (diffusers' VAE mid block)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(GROUPS, c, eps=1e-6)
        self.to_q, self.to_k, self.to_v, self.to_out = (nn.Linear(c, c) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = (proj(t)[:, None] for proj in (self.to_q, self.to_k, self.to_v))
        a = F.scaled_dot_product_attention(q, k, v)[:, 0]
        return x + self.to_out(a).transpose(1, 2).reshape(b, c, h, w)


class Upsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        top = CHANNELS[-1]
        self.post_quant_conv = nn.Conv2d(4, 4, 1)
        self.conv_in = nn.Conv2d(4, top, 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(top, top), AttnBlock(top), ResnetBlock(top, top))
        ups: list[nn.Module] = []
        cin = top
        for i, cout in enumerate(reversed(CHANNELS)):
            layers: list[nn.Module] = [ResnetBlock(cin if j == 0 else cout, cout) for j in range(3)]
            if i < len(CHANNELS) - 1:
                layers.append(Upsample(cout))
            ups.append(nn.Sequential(*layers))
            cin = cout
        self.up = nn.Sequential(*ups)
        self.norm_out = nn.GroupNorm(GROUPS, CHANNELS[0], eps=1e-6)
        self.conv_out = nn.Conv2d(CHANNELS[0], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(self.post_quant_conv(z))
        x = self.up(self.mid(x))
        return self.conv_out(F.silu(self.norm_out(x)))


def main() -> None:
    args = options(__doc__, ("bf16", "compiled")).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.variant == "bf16" else torch.float32
    with torch.device(DEVICE):
        vae = Decoder().to(dtype).eval()
    if args.variant == "compiled":
        vae = torch.compile(vae)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    latents = torch.randn(BATCH, 4, LATENT, LATENT, device=DEVICE, generator=gen) * SCALING

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for _ in range(args.steps):
            timer.tick()
            images = vae(latents.to(dtype) / SCALING).float()
            images = (images / 2 + 0.5).clamp(0, 1)
            total += images.mean()
            timer.end()
    timer.report(f"vae_decode_fp32 variant={args.variant or 'baseline'} mean pixel {total.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
