"""Streaming HiFi-GAN vocoding with the training-time weight normalisation left on every convolution.

Workload: the vocoder of a streaming text-to-speech server: a HiFi-GAN V1 generator (conv_pre 80 ->
512, kernel 7; four transposed-conv upsamplers x8, x8, x2, x2 to 256 / 128 / 64 / 32 channels; after
each, a multi-receptive-field fusion of three ResBlock1s with kernels 3 / 7 / 11 and dilations 1 / 3 /
5; conv_post to one channel, tanh; 13.9M weights in 78 convolutions), float32 (cuDNN's TF32
convolutions), inference mode, batch 1; each step synthesises 4 chunks of 32 mel frames (8,192
samples each, with 8 frames of left context). Every convolution still carries the
`torch.nn.utils.parametrizations.weight_norm` it was trained with, so each access to `.weight`
recomputes `g * v / ||v||` through the parametrization modules: 78 extra kernels and 78 trips
through the parametrization's Python per chunk, on a step made of ~300 small kernels already.

Variant `remove_weight_norm`: `parametrize.remove_parametrizations(conv, "weight")` on every
convolution at load (what HiFi-GAN's inference scripts call `remove_weight_norm()` for): the same
weights, computed once.

Variant `cuda_graph` (extra, timed but not recorded): the baseline's chunk synthesis (weight-norm
recomputation included) captured once in a CUDA graph on a static mel buffer and replayed per chunk.
Without CUDA it runs eagerly.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

if CUDA:
    MELS, INITIAL, CHUNK, CONTEXT, CHUNKS = 80, 512, 32, 8, 4
    UP_RATES, UP_KERNELS = (8, 8, 2, 2), (16, 16, 4, 4)
else:
    MELS, INITIAL, CHUNK, CONTEXT, CHUNKS = 16, 32, 8, 2, 2
    UP_RATES, UP_KERNELS = (4, 2), (8, 4)
RES_KERNELS, RES_DILATIONS = (3, 7, 11), (1, 3, 5)
HOP = 1
for _r in UP_RATES:
    HOP *= _r
LRELU = 0.1


class ResBlock1(nn.Module):
    def __init__(self, channels: int, k: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(weight_norm(nn.Conv1d(channels, channels, k, dilation=d, padding=d * (k - 1) // 2))
                                    for d in RES_DILATIONS)
        self.convs2 = nn.ModuleList(weight_norm(nn.Conv1d(channels, channels, k, padding=(k - 1) // 2))
                                    for _ in RES_DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU)), LRELU))
        return x


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv_pre = weight_norm(nn.Conv1d(MELS, INITIAL, 7, padding=3))
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        ch = INITIAL
        for rate, k in zip(UP_RATES, UP_KERNELS, strict=True):
            self.ups.append(weight_norm(nn.ConvTranspose1d(ch, ch // 2, k, rate, padding=(k - rate) // 2)))
            ch //= 2
            self.resblocks.append(nn.ModuleList(ResBlock1(ch, k) for k in RES_KERNELS))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, padding=3))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for up, blocks in zip(self.ups, self.resblocks, strict=True):
            x = up(F.leaky_relu(x, LRELU))
            x = sum(block(x) for block in blocks) / len(blocks)  # type: ignore[assignment]
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


def remove_weight_norm(model: nn.Module) -> None:
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def main() -> None:
    args = options(__doc__, ("remove_weight_norm", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        vocoder = Generator().eval()
    if args.variant == "remove_weight_norm":
        remove_weight_norm(vocoder)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    # an utterance's log-mel frames, as an acoustic model would stream them
    mel = torch.randn(1, MELS, CONTEXT + CHUNKS * CHUNK * 8, device=DEVICE, generator=gen) * 2.0 - 5.0
    static_mel = torch.empty(1, MELS, CONTEXT + CHUNK, device=DEVICE)
    static_audio = torch.empty(0)
    graph: torch.cuda.CUDAGraph | None = None

    def synthesise() -> torch.Tensor:
        return vocoder(static_mel)[..., CONTEXT * HOP:]  # drop the audio of the left context

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            for c in range(CHUNKS):
                start = ((step * CHUNKS + c) % (CHUNKS * 8)) * CHUNK
                static_mel.copy_(mel[..., start:start + CONTEXT + CHUNK])
                if args.variant == "cuda_graph" and CUDA:
                    if graph is None:
                        side = torch.cuda.Stream()
                        side.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side):
                            for _ in range(2):
                                synthesise()
                        torch.cuda.current_stream().wait_stream(side)
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            static_audio = synthesise()
                    graph.replay()
                    audio = static_audio
                else:
                    audio = synthesise()
                total += audio.abs().mean()
            timer.end()
    timer.report(f"hifigan_weight_norm variant={args.variant or 'baseline'} mean |sample| "
                 f"{total.item() / (args.steps * CHUNKS):.6f}")


if __name__ == "__main__":
    main()
