"""Global weather forecaster (ViT over 69 ERA5-style variables on a 128 x 256 grid) fed from a pageable in-memory bank.

Baseline: the training states live in an ordinary (pageable) CPU tensor and each step copies the
input and target states (8 x 69 x 128 x 256 float32 each, ~145 MB per step) with `.to("cuda")`: the
host thread stages every byte through the driver's pinned buffer and waits for the copy before it
can launch the step's kernels. Variant `pinned_bank`: the same bank pinned once at start
(`.pin_memory()`) and copied with `non_blocking=True` (on the CPU check the bank is not pinned).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, encoder, options, train
from torch import nn

C, H, W, P, BATCH, DIM, HEADS, LAYERS, BANK = (69, 128, 256, 4, 8, 384, 6, 4, 4) if CUDA else (5, 16, 32, 4, 2, 32, 2, 1, 2)
T = (H // P) * (W // P)


def main() -> None:
    args = options(__doc__, ("pinned_bank",)).parse_args()
    torch.manual_seed(0)
    body, head, params = encoder(DIM, HEADS, LAYERS, C * P * P)
    with torch.device(DEVICE):
        embed = nn.Conv2d(C, DIM, P, stride=P)
        pos = nn.Parameter(torch.randn(1, T, DIM) * 0.02)
    opt = adamw([*params, *embed.parameters(), pos])
    gen = torch.Generator().manual_seed(20)
    # consecutive atmospheric states: step i learns state k -> state k + 1
    states = torch.randn(BANK + 1, BATCH, C, H, W, generator=gen)
    if args.variant == "pinned_bank" and CUDA:
        states = states.pin_memory()
    non_blocking = args.variant == "pinned_bank"

    def loss_of(i: int) -> torch.Tensor:
        k = i % BANK
        x = states[k].to(DEVICE, non_blocking=non_blocking)
        y = states[k + 1].to(DEVICE, non_blocking=non_blocking)
        with bf16():
            tok = embed(x).flatten(2).transpose(1, 2) + pos
            out = head(body(tok))
        pred = out.float().view(BATCH, H // P, W // P, C, P, P).permute(0, 3, 1, 4, 2, 5).reshape(BATCH, C, H, W)
        return F.mse_loss(pred, y)

    train("weather_pageable_batches", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
