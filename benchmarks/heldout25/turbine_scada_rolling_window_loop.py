"""Wind-turbine fault classifier whose rolling-window features are computed in a Python loop over window positions.

Predictive maintenance from SCADA data: 256 turbines per step, 2,048 one-second samples of 32 channels
(rotor and generator speed, pitch angles, bearing and gearbox temperatures, vibration, power, ...),
float32. Rolling statistics over windows of 64 samples every 8 samples (249 windows): mean, standard
deviation and peak-to-peak range per channel, 96 features per window; then a small transformer over
the 249 windows (feature projection, 4 pre-norm blocks of width 256, 8 heads, SDPA, mean pool, 8
fault classes; bf16 autocast, fused AdamW) is trained on them.

Baseline: the features are computed as a pandas `rolling()` port, `for s in range(0, T - 64 + 1, 8):
w = x[:, s:s + 64]` with `w.mean(1)`, `w.std(1)`, `w.amax(1) - w.amin(1)`, a `torch.cat` per window and
a `torch.stack` of the 249 results: ~1,500 kernel launches of 0.5 M elements each per step, issued
one after another from Python before the model's first kernel.

Variant `unfold_windows`: `x.unfold(1, 64, 8)` gives every window as a (256, 249, 32, 64) view; the
same three statistics are taken over its last axis: 6 kernels. The same windows and statistics.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, adamw, bf16, options, train
from torch import nn

NAME = "turbine_scada_rolling_window_loop"
VARIANTS = ("unfold_windows",)

if CUDA:
    TURBINES, SAMPLES, DIM, HEADS, DEPTH = 256, 2048, 256, 8, 4
else:  # tiny check of the script on the CPU
    TURBINES, SAMPLES, DIM, HEADS, DEPTH = 4, 256, 32, 4, 1
CHANNELS, WINDOW, STRIDE, CLASSES, POOL = 32, 64, 8, 8, 2


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def rolling_loop(x: torch.Tensor) -> torch.Tensor:
    feats = []
    for s in range(0, x.shape[1] - WINDOW + 1, STRIDE):
        w = x[:, s:s + WINDOW]
        feats.append(torch.cat([w.mean(1), w.std(1), w.amax(1) - w.amin(1)], -1))
    return torch.stack(feats, 1)


def rolling_unfold(x: torch.Tensor) -> torch.Tensor:
    w = x.unfold(1, WINDOW, STRIDE)  # (B, windows, C, WINDOW), a view
    return torch.cat([w.mean(-1), w.std(-1), w.amax(-1) - w.amin(-1)], -1)


class FaultClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(3 * CHANNELS, DIM)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.out = nn.Linear(DIM, CLASSES)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        h = self.inp(f)
        for blk in self.blocks:
            h = blk(h, sdpa)
        return self.out(self.norm(h).mean(1))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    features = rolling_unfold if args.variant == "unfold_windows" else rolling_loop
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = FaultClassifier()
    opt = adamw(list(model.parameters()))

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    scada = torch.randn(POOL, TURBINES, SAMPLES, CHANNELS, generator=gen, device=DEVICE).cumsum(2) * 0.05
    labels = torch.randint(0, CLASSES, (POOL, TURBINES), generator=gen, device=DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        f = features(scada[i % POOL])
        with bf16():
            logits = model(f)
        return F.cross_entropy(logits.float(), labels[i % POOL])

    train(NAME, args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
