"""Quantization-aware training of a NeRF MLP for an int8 mobile renderer (8 layers of width 256 with
a skip, density and colour heads, 2,048 rays x 128 samples = 262,144 points per batch, fp32 with TF32
matmuls): every Linear's input is fake-quantized per tensor to uint8 (fixed calibrated scale and
zero point) and its weight per output channel to int8, with a straight-through estimator that
passes the gradient only where the value was not clipped.

Baseline: the fake quantization written out, as research QAT code does: an `autograd.Function`
whose forward is divide, round, add zero point, two comparisons and an and (the mask), clamp,
subtract, multiply: ~9 elementwise kernels over each 262,144 x 256 fp32 activation, and a saved
mask. Variant `fused_fake_quant`: `torch.fake_quantize_per_tensor_affine` /
`torch.fake_quantize_per_channel_affine`: one kernel each, the same clipped straight-through
gradient. Same function; a value exactly halfway between two quantization steps may round
differently (the fused kernel may multiply by 1/scale instead of dividing)."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, adamw, options, train

RAYS, SAMPLES, WIDTH, DEPTH = (2048, 128, 256, 8) if CUDA else (16, 8, 32, 4)
SKIP, POS_FREQ, DIR_FREQ, BATCHES = DEPTH // 2, 10, 4, 4
A_SCALE, A_ZP = 8.0 / 255, 128  # activations: uint8 over about [-4, 4]


class HandFakeQuant(torch.autograd.Function):
    """Fake quantization with a clipped straight-through estimator, op by op."""

    @staticmethod
    def forward(ctx, x, scale, zp, qmin, qmax):
        q = torch.round(x / scale) + zp
        keep = (q >= qmin) & (q <= qmax)
        ctx.save_for_backward(keep)
        return (torch.clamp(q, qmin, qmax) - zp) * scale

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep, None, None, None, None


class QLinear(nn.Linear):
    fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_scale = self.weight.detach().abs().amax(1).clamp_min(1e-8) / 127  # per output channel
        if self.fused:
            xq = torch.fake_quantize_per_tensor_affine(x, A_SCALE, A_ZP, 0, 255)
            zp = torch.zeros_like(w_scale, dtype=torch.int32)
            wq = torch.fake_quantize_per_channel_affine(self.weight, w_scale, zp, 0, -127, 127)
        else:
            xq = HandFakeQuant.apply(x, A_SCALE, A_ZP, 0, 255)
            wq = HandFakeQuant.apply(self.weight, w_scale[:, None], 0, -127, 127)
        return F.linear(xq, wq, self.bias)


def encode(x: torch.Tensor, freqs: int) -> torch.Tensor:
    """NeRF positional encoding: x, sin(2^k x), cos(2^k x)."""
    ang = x[..., None] * (2.0 ** torch.arange(freqs, device=x.device)) * torch.pi
    return torch.cat([x, ang.sin().flatten(-2), ang.cos().flatten(-2)], -1)


class NeRF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        pin, din = 3 + 6 * POS_FREQ, 3 + 6 * DIR_FREQ
        self.layers = nn.ModuleList(QLinear((pin if i == 0 else WIDTH) + (pin if i == SKIP else 0), WIDTH)
                                    for i in range(DEPTH))
        self.sigma, self.feat = QLinear(WIDTH, 1), QLinear(WIDTH, WIDTH)
        self.rgb1, self.rgb2 = QLinear(WIDTH + din, WIDTH // 2), QLinear(WIDTH // 2, 3)

    def forward(self, pts: torch.Tensor, dirs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = encode(pts, POS_FREQ)
        h = p
        for i, layer in enumerate(self.layers):
            h = F.relu(layer(torch.cat([h, p], -1) if i == SKIP else h))
        d = encode(dirs, DIR_FREQ).expand(*h.shape[:-1], -1)
        rgb = torch.sigmoid(self.rgb2(F.relu(self.rgb1(torch.cat([self.feat(h), d], -1)))))
        return F.softplus(self.sigma(h).squeeze(-1)), rgb


def render(sigma: torch.Tensor, rgb: torch.Tensor, delta: float) -> torch.Tensor:
    """Volume rendering along each ray: alpha compositing with exclusive transmittance."""
    alpha = 1 - torch.exp(-sigma * delta)
    trans = torch.cumprod(F.pad(1 - alpha + 1e-10, (1, 0), value=1.0)[..., :-1], -1)
    return ((alpha * trans)[..., None] * rgb).sum(-2)


def main() -> None:
    args = options(__doc__ or "", ("fused_fake_quant",)).parse_args()
    QLinear.fused = args.variant == "fused_fake_quant"
    torch.backends.cuda.matmul.allow_tf32 = True  # as NeRF training scripts do
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = NeRF()
        gen = torch.Generator(DEVICE).manual_seed(1)
        origins = torch.rand(BATCHES, RAYS, 1, 3, generator=gen) * 2 - 1
        dirs = F.normalize(torch.randn(BATCHES, RAYS, 1, 3, generator=gen), dim=-1)
        t = torch.linspace(0.1, 2.0, SAMPLES)[:, None]
        target = torch.rand(BATCHES, RAYS, 3, generator=gen)
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        j = i % BATCHES
        sigma, rgb = model(origins[j] + t * dirs[j], dirs[j])
        return F.mse_loss(render(sigma, rgb, 1.9 / SAMPLES), target[j])

    train("nerf_qat_fake_quant", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
