"""Batch transcription with a CTC speech encoder whose greedy decoding copies each utterance to the host with `.cpu().tolist()` and collapses it in Python.

Baseline: a CTC acoustic model (80-dim log-mel frames stacked 4 at a time -> Linear 320 -> 512,
learned positions, 6-layer pre-norm `nn.TransformerEncoder` (8 heads, MLP 2048), LayerNorm, Linear
512 -> 1,024 tokens with blank 0), bf16, inference mode; 64 utterances of 2.4-4 s (240-400 encoder
frames after stacking, padded to 400) per step. Greedy decoding as in many recipes: `argmax` on the
GPU, then per utterance `ids[i, :length].cpu().tolist()` (a device sync and a small copy each) and a
Python loop that drops repeats and blanks (~20k frames per batch). Variant `gpu_collapse`: the repeat
and blank mask computed on the GPU for the whole batch, one copy of the kept ids (-1 elsewhere) to
the host, then per utterance a numpy selection and `tolist()` of the ~40-100 kept tokens.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_c = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
CUDA, DEVICE, options, StepTimer = (_c[k] for k in ("CUDA", "DEVICE", "options", "StepTimer"))


class CTCModel(nn.Module):
    def __init__(self, mels: int, stack: int, dim: int, heads: int, layers: int, vocab: int, frames: int) -> None:
        super().__init__()
        self.stack = stack
        self.inp = nn.Linear(mels * stack, dim)
        self.pos = nn.Parameter(torch.randn(frames, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        b, t, m = feats.shape
        x = self.inp(feats.reshape(b, t // self.stack, m * self.stack)) + self.pos
        return self.out(self.norm(self.body(x)))


def greedy_python(ids: torch.Tensor, lengths: list[int]) -> list[list[int]]:
    """Per utterance: copy to the host, then drop repeats and blanks in a Python loop."""
    hyps = []
    for i, n in enumerate(lengths):
        seq = ids[i, :n].cpu().tolist()
        out, prev = [], 0
        for s in seq:
            if s != prev and s != 0:
                out.append(s)
            prev = s
        hyps.append(out)
    return hyps


def greedy_gpu(ids: torch.Tensor, lengths: list[int]) -> list[list[int]]:
    """Repeat/blank mask on the GPU for the batch, one copy, a numpy selection per utterance."""
    valid = torch.arange(ids.shape[1], device=ids.device)[None, :] < torch.tensor(lengths, device=ids.device)[:, None]
    prev = F.pad(ids[:, :-1], (1, 0), value=0)
    kept = torch.where((ids != prev) & (ids != 0) & valid, ids, -1).cpu().numpy()
    return [row[row >= 0].tolist() for row in kept]


def main() -> None:
    args = options(__doc__, ("gpu_collapse",)).parse_args()
    torch.manual_seed(0)
    # GPU: 64 utterances of up to 400 encoder frames (1,600 mel frames), width 512, 6 layers; CPU check: 3 x 12 frames, width 32
    batch, frames, dim, heads, layers, vocab = (64, 400, 512, 8, 6, 1024) if CUDA else (3, 12, 32, 4, 2, 12)
    mels, stack = 80, 4
    dtype = torch.bfloat16 if CUDA else torch.float32
    model = CTCModel(mels, stack, dim, heads, layers, vocab, frames).to(DEVICE, dtype).eval()
    with torch.no_grad():  # favour the blank and repeats a little, as a trained CTC model does
        model.out.bias[0] += 3.0 if CUDA else 0.3  # ~75 % blank frames at the GPU sizes
    g = torch.Generator(device=DEVICE).manual_seed(1)
    cpu_g = torch.Generator().manual_seed(2)
    data = []
    for _ in range(2):
        feats = torch.randn(batch, frames * stack, mels, device=DEVICE, generator=g).to(dtype)
        lengths = torch.randint(frames * 6 // 10, frames + 1, (batch,), generator=cpu_g).tolist()
        data.append((feats, lengths))
    decode = greedy_gpu if args.variant == "gpu_collapse" else greedy_python

    count = checksum = 0
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            feats, lengths = data[i % 2]
            ids = model(feats).argmax(-1)
            hyps = decode(ids, lengths)
            count += sum(len(h) for h in hyps)
            checksum += sum(sum(h) for h in hyps)
            timer.end()
    timer.report(f"ctc_tolist variant={args.variant or 'baseline'} tokens {count} id checksum {checksum}")


if __name__ == "__main__":
    main()
