"""Log-mel features computed with numpy, utterance by utterance, on the training thread.

Speech frame classifier: 8 utterances of 3 s at 16 kHz per step (raw float32 waveforms in host
memory), features = 80 log-mel bands of a 400-sample Hann window every 160 samples (298 frames,
512-point rFFT, power spectrum, mel filterbank, log), computed librosa-style in numpy (float64)
per utterance, stacked and copied to the GPU; model: Linear 80 -> 768, 6-layer pre-norm
`nn.TransformerEncoder` (12 heads), a 48-class head per frame, bf16 autocast, fused AdamW.
Variants (the same waveforms, filterbank and labels, in the same order):
  gpu_features  the raw batch copied (pinned, non-blocking) and featurised on the GPU in float32:
                `unfold`, window, `torch.fft.rfft`, power, mel matmul, log
  workers       the same numpy features made in 8 DataLoader workers (pinned, non-blocking copies)
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, encoder, options

VARIANTS = ("gpu_features", "workers")
SR, WIN, HOP, NFFT, MELS = 16000, 400, 160, 512, 80


def mel_bank() -> np.ndarray:
    """An HTK-style triangular mel filterbank, (80, 257)."""
    mel = np.linspace(0, 2595 * np.log10(1 + (SR / 2) / 700), MELS + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    freqs = np.linspace(0, SR / 2, NFFT // 2 + 1)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))


BANK, WINDOW = mel_bank(), np.hanning(WIN + 1)[:-1]


def logmel_np(wav: np.ndarray) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(wav.astype(np.float64), WIN)[::HOP] * WINDOW
    power = np.abs(np.fft.rfft(frames, n=NFFT)) ** 2
    return np.log(power @ BANK.T + 1e-6).astype(np.float32)


class Utterances(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, wavs: np.ndarray) -> None:
        self.wavs = wavs

    def __len__(self) -> int:
        return len(self.wavs)

    def __getitem__(self, i: int) -> np.ndarray:
        return logmel_np(self.wavs[i])


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, layers, batch, seconds = (768, 12, 6, 8, 3.0) if CUDA else (64, 4, 2, 4, 0.5)
    n = int(SR * seconds)
    rng = np.random.default_rng(0)
    t = np.arange(n) / SR
    wavs = np.stack([np.sin(2 * np.pi * rng.uniform(80, 4000, (6, 1)) * t).sum(0) * 0.1 + rng.normal(0, 0.05, n)
                     for _ in range(4 * batch)]).astype(np.float32)
    frames = 1 + (n - WIN) // HOP
    labels = torch.randint(0, 48, (4, batch, frames), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    body, head, params = encoder(dim, heads, layers, 48)
    inp = nn.Linear(MELS, dim).to(DEVICE)
    opt = adamw([*inp.parameters(), *params])
    bank = torch.tensor(BANK.T, dtype=torch.float32, device=DEVICE)
    window = torch.tensor(WINDOW, dtype=torch.float32, device=DEVICE)
    loader = iter(torch.utils.data.DataLoader(Utterances(np.concatenate([wavs] * (args.steps // 4 + 1))), batch_size=batch,
                                              num_workers=8 if CUDA else 2, pin_memory=CUDA)) if args.variant == "workers" else None
    pinned = torch.from_numpy(wavs).pin_memory() if CUDA else torch.from_numpy(wavs)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        j = i % 4
        if args.variant == "gpu_features":
            wav = pinned[j * batch:(j + 1) * batch].to(DEVICE, non_blocking=True)
            power = torch.fft.rfft(wav.unfold(1, WIN, HOP) * window, n=NFFT).abs().pow(2)
            feats = torch.log(power @ bank + 1e-6)
        elif loader is not None:
            feats = next(loader).to(DEVICE, non_blocking=True)
        else:
            feats = torch.from_numpy(np.stack([logmel_np(w) for w in wavs[j * batch:(j + 1) * batch]])).to(DEVICE)
        with bf16():
            logits = head(body(inp(feats)))
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels[j].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"cpu_logmel variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
