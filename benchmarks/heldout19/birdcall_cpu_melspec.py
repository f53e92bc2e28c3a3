"""Bird-call classifier whose log-mel spectrograms are computed on the CPU inside the training step.

BirdCLEF-style training: 5-second clips at 32 kHz from an in-memory bank of recordings, log-mel
features (STFT n_fft 512, hop 320, Hann window, power spectrum, 64 HTK mel bands, log), a small
ResNet-style CNN over the 64 x 501 spectrograms (bf16 autocast, channels_last, fused AdamW),
182 species (cross-entropy). The baseline does what a first script does: the batch of raw
waveforms (a CPU tensor) goes through `torch.stft`, `.abs().pow(2)`, the mel matmul and the log
on the CPU, on the step's thread, and only the features are copied to the GPU, so the GPU waits
for the host's FFTs every step.

  baseline            features on the CPU, then `.to(device)`
  --variant gpu_melspec   the waveforms are copied to the GPU and the same feature code runs there

Same clips, same weights; the features differ only by CPU vs GPU FFT / matmul rounding.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

SR, SECONDS, N_FFT, HOP, MELS, SPECIES = 32000, 5, 512, 320, 64, 182
if CUDA:
    BATCH, BANK, WIDTHS = 16, 96, (32, 64, 128, 256)
else:
    BATCH, BANK, WIDTHS = 4, 12, (8, 16, 16, 32)
SAMPLES = SR * SECONDS


def mel_filterbank() -> torch.Tensor:
    """(N_FFT // 2 + 1, MELS) triangular HTK mel filters from 50 Hz to 14 kHz (float32, CPU)."""
    def hz_to_mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    mels = torch.linspace(float(hz_to_mel(torch.tensor(50.0))), float(hz_to_mel(torch.tensor(14000.0))), MELS + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    freqs = torch.linspace(0, SR / 2, N_FFT // 2 + 1)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0).t().contiguous()


def log_mel(wave: torch.Tensor, window: torch.Tensor, fbank: torch.Tensor) -> torch.Tensor:
    """(B, SAMPLES) waveforms -> (B, 1, MELS, frames) log-mel power spectrograms, on wave's device."""
    spec = torch.stft(wave, N_FFT, HOP, window=window, center=True, return_complex=True)
    power = spec.abs().pow(2)  # (B, freqs, frames)
    mel = torch.matmul(power.transpose(1, 2), fbank).transpose(1, 2)
    return torch.log(mel + 1e-6).unsqueeze(1)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.skip(x))


class CallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(1)
        self.stem = nn.Sequential(nn.Conv2d(1, WIDTHS[0], 3, 2, 1, bias=False), nn.BatchNorm2d(WIDTHS[0]), nn.ReLU())
        layers: list[nn.Module] = []
        cin = WIDTHS[0]
        for i, w in enumerate(WIDTHS):
            layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, SPECIES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(self.stem(self.norm(x)))
        return self.head(h.mean((2, 3)))


def recordings() -> tuple[torch.Tensor, torch.Tensor]:
    """A bank of synthetic field recordings (CPU, float32): 1-3 frequency-swept calls per clip with
    harmonics and pink-ish background noise; the label is the species whose call pattern it uses."""
    g = torch.Generator().manual_seed(1)
    t = torch.arange(SAMPLES) / SR
    labels = torch.randint(0, SPECIES, (BANK,), generator=g)
    bank = torch.empty(BANK, SAMPLES)
    for n in range(BANK):
        sp = int(labels[n])
        base = 1500.0 + 40.0 * sp
        sweep = 200.0 + 15.0 * (sp % 37)
        wave = 0.05 * torch.randn(SAMPLES, generator=g).cumsum(0) / math.sqrt(SAMPLES) * 8
        wave += 0.02 * torch.randn(SAMPLES, generator=g)
        for _ in range(1 + int(torch.randint(0, 3, (1,), generator=g))):
            start = float(torch.rand(1, generator=g)) * (SECONDS - 0.6)
            env = torch.exp(-((t - start - 0.25) / 0.12) ** 2)
            f_inst = base + sweep * torch.sin(2 * math.pi * 3.0 * (t - start))
            phase = 2 * math.pi * torch.cumsum(f_inst, 0) / SR
            wave += env * (torch.sin(phase) + 0.3 * torch.sin(2 * phase))
        bank[n] = wave
    return bank, labels


def main() -> None:
    args = options(__doc__, ("gpu_melspec",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = CallNet().to(memory_format=torch.channels_last)
    opt = adamw(list(model.parameters()))
    bank, labels = recordings()  # CPU tensors, as a dataset held in host memory
    picks = torch.randint(0, BANK, (args.steps, BATCH), generator=torch.Generator().manual_seed(2))
    window_cpu, fbank_cpu = torch.hann_window(N_FFT), mel_filterbank()
    window_dev, fbank_dev = window_cpu.to(DEVICE), fbank_cpu.to(DEVICE)
    labels_dev = labels.to(DEVICE)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        wave = bank[picks[i]]  # (B, SAMPLES) on the host
        if args.variant == "gpu_melspec":
            feats = log_mel(wave.to(DEVICE), window_dev, fbank_dev)
        else:
            feats = log_mel(wave, window_cpu, fbank_cpu).to(DEVICE)
        feats = feats.contiguous(memory_format=torch.channels_last)
        y = labels_dev[picks[i].to(DEVICE)]
        with bf16():
            logits = model(feats)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"birdcall_cpu_melspec variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
