"""VQ-VAE image tokenizer training (32 x 32 latents, 1,024 codes of dimension 64) with codebook distances by broadcasting.

32 images of 128 x 128 per step, a small convolutional encoder and decoder, bf16 autocast.

Baseline: the nearest code of each of the 32,768 latent vectors is found from
`((z[:, None, :] - codebook[None, :, :]) ** 2).sum(-1)`, as many VQ-VAE reimplementations write it: a
(32,768 x 1,024 x 64) float32 difference tensor (8.6 GB) is written, squared into another and
summed, a memory-bound pass over ~34 GB for what is a K = 64 matrix product. Variant
`matmul_distances`: `|z|^2 - 2 z @ codebook.T + |e|^2` (one float32 GEMM, M = 32,768, N = 1,024,
K = 64), as the original VQ-VAE code and `torch.cdist`'s matmul path compute it. Rounding differs
(the expansion cancels), so a latent exactly between two codes may pick the other one.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

BATCH, SIZE, CODES, DIM, BANK = (32, 128, 1024, 64, 4) if CUDA else (2, 16, 16, 8, 2)


class VQVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(128, 128, 3, 1, 1), nn.ReLU(), nn.Conv2d(128, DIM, 1))
        self.dec = nn.Sequential(nn.Conv2d(DIM, 128, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(64, 3, 4, 2, 1))
        self.codebook = nn.Parameter(torch.randn(CODES, DIM) * 0.5)


def main() -> None:
    args = options(__doc__, ("matmul_distances",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        vq = VQVAE()
    opt = adamw(list(vq.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    images = torch.rand(BANK, BATCH, 3, SIZE, SIZE, generator=gen, device=DEVICE) * 2 - 1
    gemm = args.variant == "matmul_distances"

    def loss_of(i: int) -> torch.Tensor:
        x = images[i % BANK]
        with bf16():
            z = vq.enc(x)
        b, d, h, w = z.shape
        z_flat = z.float().permute(0, 2, 3, 1).reshape(-1, d)  # (N, D)
        e = vq.codebook
        if gemm:
            dist = z_flat.pow(2).sum(1, keepdim=True) - 2 * z_flat @ e.t() + e.pow(2).sum(1)[None, :]
        else:
            dist = (z_flat[:, None, :] - e[None, :, :]).pow(2).sum(-1)
        idx = dist.argmin(1)
        zq = e[idx]
        commit = F.mse_loss(z_flat, zq.detach())
        code = F.mse_loss(zq, z_flat.detach())
        zq_st = (z_flat + (zq - z_flat).detach()).view(b, h, w, d).permute(0, 3, 1, 2)
        with bf16():
            recon = vq.dec(zq_st)
        return F.mse_loss(recon.float(), x) + code + 0.25 * commit

    train("vqvae_broadcast_distances", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
