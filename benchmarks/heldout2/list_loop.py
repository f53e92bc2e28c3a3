"""A detection-style training step whose loss loops in Python over the images of the batch: each
image has its own list entry of ground-truth boxes (1..24 of them), and the anchor matching (IoU,
best match), the box regression and the objectness loss run image by image: ~20 small kernels per
image.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/list_loop.py
Variants: --variant padded (the boxes padded to the batch maximum once, as a collate would, with a
validity mask; the whole loss as batched tensor ops), --variant compiled_loss (the per-image loss function under
torch.compile(dynamic=True), still called per image). On the GPU: a 4-stage conv backbone on
128 x 128 images, batch 64, 1,024 anchors per image, bf16 autocast + channels_last, SGD. Each step
ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of boxes a (..., A, 4) against b (..., B, 4), x1 y1 x2 y2: (..., A, B)."""
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter)


def image_loss(anchors: torch.Tensor, deltas: torch.Tensor, obj: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """One image: match anchors to their best box, regress matched anchors, objectness for all."""
    best, idx = iou(anchors, gt).max(-1)
    pos = (best > 0.4).float()
    target = gt[idx] - anchors
    reg = (F.smooth_l1_loss(deltas, target, reduction="none").sum(-1) * pos).sum() / pos.sum().clamp(min=1)
    return reg + F.binary_cross_entropy_with_logits(obj, pos)


def pad_boxes(gts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's box lists as one zero-padded (batch, max boxes, 4) tensor and its validity mask
    (what a collate function would build once per batch)."""
    gt = torch.nn.utils.rnn.pad_sequence(gts, batch_first=True)
    lens = torch.tensor([len(g) for g in gts], device=gt.device)
    return gt, torch.arange(gt.shape[1], device=gt.device)[None, :] < lens[:, None]


def padded_loss(anchors: torch.Tensor, deltas: torch.Tensor, obj: torch.Tensor, gt: torch.Tensor,
                valid: torch.Tensor) -> torch.Tensor:
    """All images at once: padded boxes get IoU -1, so they are never the best match."""
    ious = iou(anchors[None], gt).masked_fill(~valid[:, None, :], -1.0)
    best, idx = ious.max(-1)
    pos = (best > 0.4).float()
    target = torch.gather(gt, 1, idx[..., None].expand(-1, -1, 4)) - anchors[None]
    reg = (F.smooth_l1_loss(deltas, target, reduction="none").sum(-1) * pos).sum(-1) / pos.sum(-1).clamp(min=1)
    bce = F.binary_cross_entropy_with_logits(obj, pos, reduction="none").mean(-1)
    return (reg + bce).mean()


def main() -> None:
    args = options(__doc__, ("padded", "compiled_loss")).parse_args()
    size, batch, grid = (128, 64, 32) if CUDA else (32, 4, 8)
    torch.manual_seed(0)
    chans = [3, 32, 64, 128, 128]
    layers: list[nn.Module] = []
    for i in range(4):
        stride = 2 if i < 2 else 1
        layers += [nn.Conv2d(chans[i], chans[i + 1], 3, stride=stride, padding=1), nn.BatchNorm2d(chans[i + 1]), nn.ReLU()]
    backbone = nn.Sequential(*layers, nn.Conv2d(chans[-1], 5, 1)).to(DEVICE).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(backbone.parameters(), lr=1e-3, momentum=0.9)
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    c = torch.stack([xs, ys], -1).reshape(-1, 2).float() / grid + 0.5 / grid
    anchors = torch.cat([c - 0.06, c + 0.06], -1).to(DEVICE)
    x = torch.randn(batch, 3, size, size, device=DEVICE).contiguous(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(1)
    gts = []
    for _ in range(batch):
        k = int(torch.randint(1, 25, (1,), generator=g))
        lo = torch.rand(k, 2, generator=g) * 0.8
        gts.append(torch.cat([lo, lo + 0.05 + torch.rand(k, 2, generator=g) * 0.15], -1).to(DEVICE))
    gt_pad, valid = pad_boxes(gts)
    per_image = torch.compile(image_loss, dynamic=True) if args.variant == "compiled_loss" else image_loss
    timer = StepTimer()
    loss = torch.zeros(())
    for _ in range(args.steps):
        timer.tick()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            out = backbone(x).float().flatten(2).transpose(1, 2)  # (batch, anchors, 5)
        deltas, obj = out[..., :4], out[..., 4]
        if args.variant == "padded":
            loss = padded_loss(anchors, deltas, obj, gt_pad, valid)
        else:
            loss = torch.stack([per_image(anchors, deltas[i], obj[i], gts[i]) for i in range(batch)]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.end()
    timer.report(f"list_loop variant={args.variant or 'baseline'} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
