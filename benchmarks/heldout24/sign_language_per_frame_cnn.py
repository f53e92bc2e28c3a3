"""Isolated sign-language recognition: a per-frame CNN called once per time step of the clip instead of once on all frames.

WLASL-style recogniser (2,000 glosses) serving 16 clips of 32 frames of 112 x 112 per step: a
ResNet-18-shaped frame encoder (BatchNorm in eval mode, bf16 weights, channels_last), global
pooling to 512 features per frame, then a 2-layer temporal transformer over the 32 frame features
and a classifier; inference.
Baseline: the frame encoder is applied the way a Keras `TimeDistributed` wrapper is usually ported,
`torch.stack([cnn(clips[:, t]) for t in range(32)], 1)`: 32 forwards of 16 frames each, ~60
convolution, BatchNorm, ReLU and add kernels apiece, each too small to fill the GPU: ~2,000 launches
per step and a launch-bound encoder.
Variant `frames_in_batch`: the time axis folded into the batch, `cnn(clips.flatten(0, 1))` on 512
frames, then `.view(16, 32, 512)`: one forward, the same per-frame results (eval BatchNorm is
per-sample).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("frames_in_batch",)
CLIPS, FRAMES, SIZE, GLOSSES = (16, 32, 112, 2000) if CUDA else (2, 4, 32, 2000)
WIDTHS = (64, 128, 256, 512) if CUDA else (8, 16, 32, 64)
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.short(x))


class FrameEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = WIDTHS
        self.stem = nn.Sequential(nn.Conv2d(3, w[0], 7, 2, 3, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        for i, c in enumerate(w):
            cin = w[max(i - 1, 0)]
            layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
        self.stages = nn.Sequential(*layers)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.contiguous(memory_format=torch.channels_last)
        return self.stages(self.stem(x)).mean((2, 3))


class SignRecogniser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        d = WIDTHS[-1]
        self.cnn = FrameEncoder()
        self.time_pos = nn.Parameter(torch.randn(FRAMES, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 8, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.temporal = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, GLOSSES)

    def forward(self, clips: torch.Tensor, fold_time: bool) -> torch.Tensor:
        b, t = clips.shape[:2]
        if fold_time:
            feats = self.cnn(clips.flatten(0, 1)).view(b, t, -1)
        else:
            feats = torch.stack([self.cnn(clips[:, i]) for i in range(t)], 1)
        return self.head(self.temporal(feats + self.time_pos).mean(1))


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SignRecogniser()
        for m in model.modules():  # trained-looking BatchNorm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    model = model.to(DTYPE).to(memory_format=torch.channels_last).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    batches = [torch.randn(CLIPS, FRAMES, 3, SIZE, SIZE, generator=gen, device=DEVICE).to(DTYPE) for _ in range(2)]
    fold = args.variant == "frames_in_batch"
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            probs = model(batches[i % len(batches)], fold).float().softmax(-1)
            total += probs.max(-1).values.mean()
            timer.end()
    timer.report(f"sign_language_per_frame_cnn variant={args.variant or 'baseline'} "
                 f"mean top probability {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
