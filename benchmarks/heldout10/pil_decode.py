"""Image-classifier training whose JPEG decoding (PIL) runs on the training thread, one image at a time, before every step.

The usual suspect: host-side work and data loading. 512 synthetic photos (smooth random colour
fields with noise, 160 x 160, JPEG quality 90, ~10–15 KB each) held as bytes in memory; each step
decodes 96 of them with `PIL.Image.open(...).convert("RGB")` + `np.asarray` on the training thread,
stacks them, and copies the uint8 batch from pageable memory; on the GPU: float, normalise, a
ResNet-style CNN (stem 3 -> 64 stride 2, basic blocks at 64/128/256 channels, 100 classes), bf16
autocast, channels_last, fused AdamW. Variant `workers`: the same decoding in a `DataLoader` over
the same images in the same order (8 workers, pinned memory, `non_blocking=True` copies), so the
decoding of the next batches overlaps the step.
"""

import io

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

VARIANTS = ("workers",)
if CUDA:
    IMAGES, SIZE, BATCH, WORKERS, WIDTHS, CLASSES = 512, 160, 96, 8, (64, 128, 256), 100
else:
    IMAGES, SIZE, BATCH, WORKERS, WIDTHS, CLASSES = 16, 32, 4, 2, (8, 16, 32), 10
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def make_jpegs() -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(IMAGES):
        low = rng.uniform(0, 255, (SIZE // 16, SIZE // 16, 3)).astype(np.uint8)
        img = Image.fromarray(low).resize((SIZE, SIZE), Image.BICUBIC)
        arr = np.clip(np.asarray(img, dtype=np.int16) + rng.integers(-12, 13, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


class JpegBatches(Dataset):
    """Item k: the k-th image of the run's sequence (image k mod IMAGES) and its label."""

    def __init__(self, jpegs: list[bytes], labels: np.ndarray, length: int) -> None:
        self.jpegs, self.labels, self.length = jpegs, labels, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(decode(self.jpegs[k % IMAGES]).copy()), int(self.labels[k % IMAGES])


class Basic(nn.Module):
    def __init__(self, i: int, o: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o)
        self.c2, self.b2 = nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o)
        self.skip = nn.Sequential() if stride == 1 and i == o else nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.skip(x) + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def cnn() -> nn.Module:
    a, b, c = WIDTHS
    return nn.Sequential(nn.Conv2d(3, a, 3, 2, 1, bias=False), nn.BatchNorm2d(a), nn.ReLU(),
                         Basic(a, a, 1), Basic(a, a, 1), Basic(a, b, 2), Basic(b, b, 1), Basic(b, c, 2), Basic(c, c, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, CLASSES))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    jpegs = make_jpegs()
    labels = np.random.default_rng(1).integers(0, CLASSES, IMAGES)
    fmt = torch.channels_last if CUDA else torch.contiguous_format
    model = cnn().to(DEVICE, memory_format=fmt)
    opt = adamw(list(model.parameters()))
    mean, std = MEAN.to(DEVICE), STD.to(DEVICE)
    if args.variant == "workers":
        loader = DataLoader(JpegBatches(jpegs, labels, args.steps * BATCH), batch_size=BATCH, shuffle=False,
                            num_workers=WORKERS, pin_memory=CUDA, prefetch_factor=4, persistent_workers=True)
        batches = iter(loader)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        if args.variant == "workers":
            imgs, y = next(batches)
            imgs, y = imgs.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
        else:
            idx = [(i * BATCH + j) % IMAGES for j in range(BATCH)]
            imgs = torch.from_numpy(np.stack([decode(jpegs[k]) for k in idx])).to(DEVICE)
            y = torch.from_numpy(labels[idx]).to(DEVICE)
        x = ((imgs.permute(0, 3, 1, 2).float() - mean) / std).contiguous(memory_format=fmt)
        with bf16():
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        del loss
        timer.end()
    timer.report(f"pil_decode variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
