"""Multi-object tracking: a person re-identification CNN run once per detection box, in a Python loop.

The appearance step of a DeepSORT-style tracker: for each video frame, the detector's boxes (here
24 per frame, 4 frames per step: a crowded scene from 4 cameras) are cropped from the frame with
`torchvision.ops.roi_align`-like bilinear sampling (done with `F.grid_sample`), resized to 128x64,
and embedded by a small ResNet-style re-ID network (bf16, eval, channels_last) into L2-normalised
256-d vectors, which are matched to the tracks' galleries by cosine similarity. The baseline does
what tracker code commonly does: `for box in boxes: emb = model(crop(frame, box)[None])` - one
forward pass of batch 1 per detection, 96 forward passes per step, each a few dozen small kernels.

Variants:
- baseline: one crop and one forward pass per detection box.
- batched_crops: all boxes of the step cropped with one `grid_sample` call (each camera's boxes as
  one tall sampling grid over its frame) and embedded in one forward pass of batch 96.

Sources: the PyTorch performance tuning guide and the CUDA semantics notes on asynchronous kernel
launches (cited from memory); the `torch.nn.functional.affine_grid` docstring in the installed
torch 2.13 (the (N, 2, 3) `theta` and the size it samples).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.skip(x) + self.body(x))


class ReIDNet(nn.Module):
    def __init__(self, width: int, dim: int) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True))
        self.stages = nn.Sequential(
            Bottleneck(w, w, 2 * w, 1), Bottleneck(2 * w, w, 2 * w, 1),
            Bottleneck(2 * w, 2 * w, 4 * w, 2), Bottleneck(4 * w, 2 * w, 4 * w, 1),
            Bottleneck(4 * w, 4 * w, 8 * w, 2), Bottleneck(8 * w, 4 * w, 8 * w, 1))
        self.fc = nn.Linear(8 * w, dim)
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stages(self.stem(x)).mean(dim=(2, 3))
        return F.normalize(self.bn(self.fc(h)), dim=1)


def crop_grids(boxes: torch.Tensor, h: int, w: int, out_hw: tuple[int, int]) -> torch.Tensor:
    """Sampling grids (N, oh, ow, 2) for boxes (N, 4) = (x0, y0, x1, y1) in pixels of an h x w frame."""
    x0, y0, x1, y1 = boxes.unbind(1)
    theta = torch.zeros(boxes.size(0), 2, 3, device=boxes.device, dtype=boxes.dtype)
    theta[:, 0, 0] = (x1 - x0) / w
    theta[:, 0, 2] = (x0 + x1) / w - 1
    theta[:, 1, 1] = (y1 - y0) / h
    theta[:, 1, 2] = (y0 + y1) / h - 1
    return F.affine_grid(theta, [boxes.size(0), 3, *out_hw], align_corners=False)


def main() -> None:
    args = options(__doc__, ("batched_crops",)).parse_args()
    torch.manual_seed(0)
    cams, per_frame, fh, fw, out_hw, width = (4, 24, 720, 1280, (128, 64), 32) if CUDA else (2, 3, 48, 64, (16, 8), 8)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = ReIDNet(width, 256).eval().to(dtype=dtype, memory_format=torch.channels_last)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    frames = torch.rand(4, cams, 3, fh, fw, device=DEVICE, generator=gen).to(dtype)
    # person-shaped boxes: height 2-3x width, inside the frame
    bw = torch.rand(4, cams, per_frame, device=DEVICE, generator=gen) * fw * 0.06 + fw * 0.02
    bh = bw * (2 + torch.rand(4, cams, per_frame, device=DEVICE, generator=gen))
    bx = torch.rand(4, cams, per_frame, device=DEVICE, generator=gen) * (fw - bw)
    by = torch.rand(4, cams, per_frame, device=DEVICE, generator=gen) * (fh - bh).clamp(min=1)
    boxes = torch.stack([bx, by, bx + bw, by + bh], dim=-1)  # (4, cams, per_frame, 4)
    gallery = F.normalize(torch.randn(64, 256, device=DEVICE, generator=gen), dim=1).to(dtype)  # track features
    timer = StepTimer()
    matched = torch.zeros((), device=DEVICE, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            frame, bxs = frames[i % 4], boxes[i % 4]
            if args.variant == "batched_crops":
                oh, ow = out_hw
                # every box of a camera as one tall sampling grid over that camera's frame
                grids = crop_grids(bxs.reshape(-1, 4), fh, fw, out_hw).to(dtype).view(cams, per_frame * oh, ow, 2)
                crops = F.grid_sample(frame, grids, mode="bilinear", align_corners=False)  # (cams, 3, per_frame*oh, ow)
                crops = crops.view(cams, 3, per_frame, oh, ow).transpose(1, 2).reshape(-1, 3, oh, ow)
                emb = model(crops.contiguous(memory_format=torch.channels_last))
            else:
                embs = []
                for c in range(cams):
                    for b in range(per_frame):
                        grid = crop_grids(bxs[c, b][None], fh, fw, out_hw).to(dtype)
                        crop = F.grid_sample(frame[c][None], grid, mode="bilinear", align_corners=False)
                        embs.append(model(crop.contiguous(memory_format=torch.channels_last)))
                emb = torch.cat(embs)
            sim = emb @ gallery.t()  # (boxes, tracks) cosine similarity
            matched += sim.max(dim=1).values.float().mean()
            timer.end()
    timer.report(f"reid_per_detection variant={args.variant or 'baseline'} mean best similarity {matched.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
