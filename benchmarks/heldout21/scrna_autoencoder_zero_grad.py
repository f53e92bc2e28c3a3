"""Single-cell RNA autoencoder trained with `optimizer.zero_grad(set_to_none=False)`: every step writes zeros
into 306 M float32 gradients, and the backward then adds each new gradient into them (read, read, write)."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

VARIANT = "grads_to_none"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# genes, hidden width, latent width, cells per step, batches in the bank
GENES, HID, LAT, BATCH, BANK = (32768, 4096, 512, 256, 8) if CUDA else (512, 128, 32, 16, 2)

with torch.device(DEVICE):
    model = nn.Sequential(
        nn.Linear(GENES, HID), nn.GELU(), nn.Linear(HID, HID), nn.GELU(), nn.Linear(HID, LAT),
        nn.Linear(LAT, HID), nn.GELU(), nn.Linear(HID, HID), nn.GELU(), nn.Linear(HID, GENES))
    gen = torch.Generator(DEVICE).manual_seed(1)
    rates = torch.rand(BANK * BATCH, GENES, generator=gen) ** 4 * 8.0  # sparse-ish expression rates
    cells = torch.log1p(torch.poisson(rates, generator=gen))  # log1p counts, the usual scRNA input
opt = adamw(list(model.parameters()))

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    x = cells[(i % BANK) * BATCH:(i % BANK + 1) * BATCH]
    with bf16():
        recon = model(x)
    loss = F.mse_loss(recon.float(), x)
    # baseline: the pre-2.0 default, still written out in many training loops
    opt.zero_grad(set_to_none=args.variant == VARIANT)
    loss.backward()
    opt.step()
    total += loss.detach()
    timer.end()
timer.report(f"scrna_autoencoder_zero_grad variant={args.variant or 'baseline'} "
             f"mean loss {total.item() / args.steps:.6f}")
