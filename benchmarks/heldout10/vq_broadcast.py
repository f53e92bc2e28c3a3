"""VQ-VAE training whose nearest-code search materialises every (latent, code, dim) difference by broadcasting.

The usual suspect: memory traffic. A VQ-VAE (conv encoder 3 -> 128 -> 128 -> 64 at 1/4 resolution,
codebook of 2,048 x 64, conv decoder back to 128 x 128 x 3), 16 images of 128 x 128 per step
(16,384 latent vectors), bf16 autocast for the convolutions, channels_last, fused AdamW; the
quantiser in float32 with the VQ-VAE losses (reconstruction, codebook, 0.25 x commitment) and the
straight-through estimator. Baseline: `((z[:, None, :] - codebook[None]) ** 2).sum(-1).argmin(1)`,
which writes and re-reads two (16,384 x 2,048 x 64) float32 tensors (8.6 GB each) per step.
Variant `matmul_dist`: `z.pow(2).sum(1, keepdim=True) - 2 * z @ codebook.T + codebook.pow(2).sum(1)`
(one 16,384 x 2,048 x 64 GEMM and a 134 MB distance matrix), then the same argmin; where two codes
are within rounding of each other the two forms may pick different ones.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

VARIANTS = ("matmul_dist",)
if CUDA:
    BATCH, SIZE, CODES, DIM, HID, POOL = 16, 128, 2048, 64, 128, 256
else:
    BATCH, SIZE, CODES, DIM, HID, POOL = 2, 32, 64, 16, 16, 8


def nearest_broadcast(z: torch.Tensor, book: torch.Tensor) -> torch.Tensor:
    return ((z[:, None, :] - book[None]) ** 2).sum(-1).argmin(1)


def nearest_matmul(z: torch.Tensor, book: torch.Tensor) -> torch.Tensor:
    dist = z.pow(2).sum(1, keepdim=True) - 2 * z @ book.t() + book.pow(2).sum(1)
    return dist.argmin(1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    fmt = torch.channels_last if CUDA else torch.contiguous_format
    enc = nn.Sequential(nn.Conv2d(3, HID, 4, 2, 1), nn.ReLU(), nn.Conv2d(HID, HID, 4, 2, 1), nn.ReLU(),
                        nn.Conv2d(HID, HID, 3, 1, 1), nn.ReLU(), nn.Conv2d(HID, DIM, 1)).to(DEVICE, memory_format=fmt)
    dec = nn.Sequential(nn.Conv2d(DIM, HID, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(HID, HID, 4, 2, 1), nn.ReLU(),
                        nn.ConvTranspose2d(HID, 3, 4, 2, 1)).to(DEVICE, memory_format=fmt)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    low = torch.randn(POOL, 3, SIZE // 16, SIZE // 16, device=DEVICE, generator=gen)
    pool = torch.tanh(F.interpolate(low, size=SIZE, mode="bicubic", align_corners=False)).contiguous(memory_format=fmt)
    book = nn.Embedding(CODES, DIM).to(DEVICE)
    with torch.no_grad():  # codebook initialised from encoder outputs of the first batch (data init)
        first = enc(pool[:BATCH]).float().permute(0, 2, 3, 1).reshape(-1, DIM)
        book.weight.copy_(first[torch.randperm(first.shape[0], device=DEVICE, generator=gen)[:CODES]])
    opt = adamw([*enc.parameters(), *dec.parameters(), *book.parameters()])
    nearest = nearest_matmul if args.variant == "matmul_dist" else nearest_broadcast
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    used = 0
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        start = (i * BATCH) % POOL
        x = pool[start:start + BATCH]
        with bf16():
            z_map = enc(x)
        z = z_map.float().permute(0, 2, 3, 1).reshape(-1, DIM)
        with torch.no_grad():
            codes = nearest(z.detach(), book.weight.detach())
        e = book(codes)
        zq = z + (e - z).detach()  # straight-through
        zq_map = zq.view(x.shape[0], SIZE // 4, SIZE // 4, DIM).permute(0, 3, 1, 2)
        with bf16():
            recon = dec(zq_map.contiguous(memory_format=fmt))
        loss = F.mse_loss(recon.float(), x) + F.mse_loss(e, z.detach()) + 0.25 * F.mse_loss(z, e.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        if i == args.steps - 1:
            used = int(torch.unique(codes).numel())
        del loss, recon, z, e, zq
        timer.end()
    timer.report(f"vq_broadcast variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}, "
                 f"{used} codes used in the last step")


if __name__ == "__main__":
    main()
