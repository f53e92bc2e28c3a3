"""PatchTST-style multivariate forecaster trained with autograd anomaly detection left on.

Long-horizon weather forecasting (21 station variables, 336 hourly readings in, 96 out) with a
channel-independent patch transformer (RevIN instance normalisation, patches of 16 with stride 8,
4 pre-norm blocks of width 256, a flatten head, MSE; bf16 autocast, fused AdamW). The script
starts, as many training scripts do after a hunt for a NaN, with
`torch.autograd.set_detect_anomaly(True)`: every autograd node created in the forward stores the
Python stack of its creation, and the backward checks every node's outputs for NaN, reading the
answer on the host: one device-to-host synchronisation per backward node.

  baseline        anomaly detection on for the whole run
  --variant anomaly_off   the same loop without it (`set_detect_anomaly(False)`, the default)

Both variants run the same kernels on the same data and weights; the NaN checks only read.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    BATCH, CHANNELS, LOOKBACK, HORIZON, WIDTH, HEADS, LAYERS = 64, 21, 336, 96, 256, 8, 4
else:
    BATCH, CHANNELS, LOOKBACK, HORIZON, WIDTH, HEADS, LAYERS = 4, 3, 64, 16, 32, 4, 2
PATCH, STRIDE = 16, 8
PATCHES = (LOOKBACK - PATCH) // STRIDE + 2  # PatchTST pads the end by one stride


class PatchTST(nn.Module):
    """RevIN -> patches -> linear patch embedding + learned positions -> blocks -> flatten head -> de-normalise."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(PATCH, WIDTH)
        self.pos = nn.Parameter(torch.randn(PATCHES, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(WIDTH, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(PATCHES * WIDTH, HORIZON)
        self.affine_w = nn.Parameter(torch.ones(CHANNELS))
        self.affine_b = nn.Parameter(torch.zeros(CHANNELS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, L, C)
        b = x.shape[0]
        mean = x.mean(1, keepdim=True)
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5)
        x = (x - mean) / std * self.affine_w + self.affine_b
        x = x.permute(0, 2, 1)  # (B, C, L), one series per channel
        x = F.pad(x, (0, STRIDE), mode="replicate")
        x = x.unfold(-1, PATCH, STRIDE).reshape(b * CHANNELS, PATCHES, PATCH)
        h = self.embed(x) + self.pos
        for blk in self.blocks:
            h = blk(h, F.scaled_dot_product_attention)
        y = self.head(self.norm(h).flatten(1)).view(b, CHANNELS, HORIZON).permute(0, 2, 1)
        return (y.float() - self.affine_b) / (self.affine_w + 1e-10) * std + mean


def main() -> None:
    args = options(__doc__, ("anomaly_off",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = PatchTST()
    opt = adamw(list(model.parameters()))
    # a synthetic weather record: daily and weekly cycles, slow trends and noise per variable
    g = torch.Generator(device=DEVICE).manual_seed(1)
    hours = 6000
    t = torch.arange(hours, device=DEVICE, dtype=torch.float32)[:, None]
    phase = torch.rand(1, CHANNELS, generator=g, device=DEVICE) * 6.28
    amp = 0.5 + torch.rand(1, CHANNELS, generator=g, device=DEVICE) * 2
    series = (amp * torch.sin(t * 6.2832 / 24 + phase) + 0.4 * torch.sin(t * 6.2832 / 168 + 2 * phase)
              + 0.002 * t * (torch.rand(1, CHANNELS, generator=g, device=DEVICE) - 0.5)
              + 0.3 * torch.randn(hours, CHANNELS, generator=g, device=DEVICE))
    starts = torch.randint(0, hours - LOOKBACK - HORIZON, (args.steps, BATCH), generator=g, device=DEVICE)
    window = torch.arange(LOOKBACK + HORIZON, device=DEVICE)

    torch.autograd.set_detect_anomaly(args.variant != "anomaly_off")  # left on after debugging a NaN
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        seg = series[starts[i][:, None] + window]  # (B, L + H, C)
        x, y = seg[:, :LOOKBACK], seg[:, LOOKBACK:]
        with bf16():
            pred = model(x)
        loss = F.mse_loss(pred, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    torch.autograd.set_detect_anomaly(False)
    timer.report(f"patchtst_anomaly_mode variant={args.variant or 'baseline'} mean mse {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
