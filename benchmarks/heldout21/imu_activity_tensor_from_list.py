"""Wearable activity recognition (6-axis IMU windows, a conv stem and a small transformer) whose batches are
built with `torch.tensor(list_of_numpy_windows)`: torch walks every element of the list of arrays in Python-level
sequence code on the step's thread (the "extremely slow" path its own warning names) before the copy."""

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, encoder, options, train
from torch import nn

VARIANT = "stack_numpy"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# windows in the dataset, channels, samples per window (2.56 s at 100 Hz), windows per batch, width, layers
N_WIN, CH, LEN, BATCH, DIM, LAYERS = (4096, 6, 256, 128, 256, 4) if CUDA else (64, 6, 64, 8, 32, 1)
CLASSES = 12
warnings.filterwarnings("once", message="Creating a tensor from a list of numpy.ndarrays")

rng = np.random.default_rng(0)
t = np.arange(LEN, dtype=np.float32) / 100.0
labels = rng.integers(0, CLASSES, N_WIN).tolist()
# one float32 array per window, as a per-recording Dataset returns them
windows = [(np.sin(2 * np.pi * (0.5 + lab / 4) * t)[None, :] * rng.uniform(0.5, 2.0, (CH, 1))
            + rng.normal(0, 0.3, (CH, LEN))).astype(np.float32) for lab in labels]
picks = [rng.integers(0, N_WIN, BATCH).tolist() for _ in range(args.steps)]

with torch.device(DEVICE):
    stem = nn.Sequential(nn.Conv1d(CH, DIM, 8, stride=4, padding=2), nn.GELU())
body, head, params = encoder(DIM, 8 if CUDA else 4, LAYERS, CLASSES)
opt = adamw([*stem.parameters(), *params])


def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [windows[j] for j in picks[i]]
    # variant: one contiguous array, one memcpy; baseline: element by element through the list of arrays
    x = torch.from_numpy(np.stack(rows)) if args.variant == VARIANT else torch.tensor(rows)
    y = torch.tensor([labels[j] for j in picks[i]])
    return x.to(DEVICE), y.to(DEVICE)


def loss_of(i: int) -> torch.Tensor:
    x, y = batch(i)
    with bf16():
        h = body(stem(x).transpose(1, 2))
        logits = head(h.mean(1))
    return F.cross_entropy(logits.float(), y)


train("imu_activity_tensor_from_list", args.variant, args.steps, opt, loss_of)
