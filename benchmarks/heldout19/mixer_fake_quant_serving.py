"""Quantization-aware-trained MLP-Mixer served as it was trained: fake-quantized float32, not int8.

An MLP-Mixer-B/16 for satellite land-cover tiles (256 x 256 RGB, 256 patches, 12 layers of
width 768, token MLP 384, channel MLP 3,072, 10 classes) after int8 quantization-aware training:
every Linear has a frozen per-tensor activation scale (symmetric int8) and per-channel weight
scales (symmetric int8), as QAT leaves them. The serving code keeps the QAT modules: each call
fake-quantizes the input with `torch.fake_quantize_per_tensor_affine` and the float32 weight with
`torch.fake_quantize_per_channel_affine` (the fused ops `torch.ao.quantization`'s FakeQuantize
calls) and runs `F.linear` in float32: simulated int8, float32 GEMMs (no TF32) on 8,192 and
24,576-row inputs, plus a weight-sized quantize pass per call. Batches of 32 tiles, no grad.

  baseline        fake-quantized float32 `F.linear` (the QAT graph)
  --variant int8_mm   converted: int8 weights quantized once at load, the activation quantized to
                  int8 per call, `torch._int_mm` (int8 x int8 -> int32), rescaled by scale_x * scale_w

Same scales and the same integer values (weights and activations round to the same int8 codes,
except exact ties if the fused op multiplies by 1/scale where the variant divides); the
float32 sums of products differ from the exact int32 accumulation in the last bits.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

CLASSES, PATCH = 10, 16
if CUDA:
    TILES, SIZE, WIDTH, TOKEN_HIDDEN, CHANNEL_HIDDEN, LAYERS = 32, 256, 768, 384, 3072, 12
else:
    TILES, SIZE, WIDTH, TOKEN_HIDDEN, CHANNEL_HIDDEN, LAYERS = 2, 64, 32, 32, 64, 2
TOKENS = (SIZE // PATCH) ** 2


class QATLinear(nn.Linear):
    """A Linear with frozen QAT quantization parameters; `convert()` makes it a real int8 layer."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout)
        self.register_buffer("x_scale", torch.full((), 1e-8))
        self.register_buffer("w_scale", torch.ones(cout))
        self.register_buffer("x_zero", torch.zeros((), dtype=torch.int32))
        self.register_buffer("w_zero", torch.zeros(cout, dtype=torch.int32))
        self.calibrating = False
        self.w_int8: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.calibrating:  # the observer the QAT run ended with: absmax of the inputs
            self.x_scale = torch.maximum(self.x_scale, x.detach().abs().amax() / 127)
            return F.linear(x, self.weight, self.bias)
        if self.w_int8 is None:  # QAT graph: simulated int8 in float32
            xq = torch.fake_quantize_per_tensor_affine(x, self.x_scale, self.x_zero, -128, 127)
            wq = torch.fake_quantize_per_channel_affine(self.weight, self.w_scale, self.w_zero, 0, -127, 127)
            return F.linear(xq, wq, self.bias)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        x_int8 = torch.clamp(torch.round(x2 / self.x_scale), -128, 127).to(torch.int8)
        acc = torch._int_mm(x_int8, self.w_int8.t())  # int32
        y = acc.float() * (self.x_scale * self.w_scale) + self.bias
        return y.view(*shape[:-1], -1)

    def freeze_weight_scale(self) -> None:
        self.w_scale = self.weight.detach().abs().amax(1).clamp(min=1e-8) / 127

    def convert(self) -> None:
        """Quantize the weight once, as `torch.ao.quantization.convert` would."""
        w = torch.clamp(torch.round(self.weight.detach() / self.w_scale[:, None]), -127, 127)
        self.w_int8 = w.to(torch.int8).contiguous()


class MixerLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.tok1, self.tok2 = QATLinear(TOKENS, TOKEN_HIDDEN), QATLinear(TOKEN_HIDDEN, TOKENS)
        self.ch1, self.ch2 = QATLinear(WIDTH, CHANNEL_HIDDEN), QATLinear(CHANNEL_HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, TOKENS, WIDTH)
        t = self.n1(x).transpose(1, 2)  # mix along the tokens of each channel
        x = x + self.tok2(F.gelu(self.tok1(t))).transpose(1, 2)
        return x + self.ch2(F.gelu(self.ch1(self.n2(x))))


class Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, PATCH, PATCH)
        self.layers = nn.ModuleList(MixerLayer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.stem(img).flatten(2).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


def land_tiles(g: torch.Generator, n: int) -> torch.Tensor:
    """Satellite-like tiles: smooth fields of a few land-cover colours plus texture noise (normalised)."""
    coarse = torch.rand(n, 3, SIZE // 32, SIZE // 32, generator=g, device=DEVICE)
    img = F.interpolate(coarse, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    img = img + 0.08 * torch.randn(n, 3, SIZE, SIZE, generator=g, device=DEVICE)
    return (img - 0.5) / 0.3


def main() -> None:
    args = options(__doc__, ("int8_mm",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Mixer().eval()
    qlinears = [m for m in model.modules() if isinstance(m, QATLinear)]
    g = torch.Generator(device=DEVICE).manual_seed(1)
    with torch.no_grad():  # the scales QAT ended with (the same in both variants)
        for m in qlinears:
            m.calibrating = True
            m.freeze_weight_scale()
        model(land_tiles(g, TILES))
        for m in qlinears:
            m.calibrating = False
            if args.variant == "int8_mm":
                m.convert()

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    hist = torch.zeros(CLASSES, device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            logits = model(land_tiles(g, TILES))
            total += logits.double().logsumexp(-1).mean()
            hist += F.one_hot(logits.argmax(-1), CLASSES).double().sum(0)
            timer.end()
    timer.report(f"mixer_fake_quant_serving variant={args.variant or 'baseline'} mean logsumexp "
                 f"{total.item() / args.steps:.5f} classes {hist.long().tolist()}")


if __name__ == "__main__":
    main()
