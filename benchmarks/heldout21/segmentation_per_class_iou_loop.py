"""Semantic-segmentation validation (150 ADE20K-style classes, 8 images of 256 x 256 per step, a small conv
encoder-decoder in bf16) whose mIoU counts are accumulated class by class in a Python loop: two compares, an
and, an or, two sums and two in-place adds per class, ~1,200 tiny kernels launched one after another per step."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

VARIANT = "confusion_matrix"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# images per step, side, classes, width
BATCH, SIDE, C, WIDTH = (8, 256, 150, 64) if CUDA else (2, 32, 6, 8)


def conv(ci: int, co: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU())


with torch.device(DEVICE):
    net = nn.Sequential(
        conv(3, WIDTH, 2), conv(WIDTH, WIDTH), conv(WIDTH, 2 * WIDTH, 2), conv(2 * WIDTH, 2 * WIDTH),
        conv(2 * WIDTH, 4 * WIDTH, 2), conv(4 * WIDTH, 4 * WIDTH), nn.Conv2d(4 * WIDTH, C, 1),
        nn.Upsample(scale_factor=8, mode="bilinear")).eval()
    gen = torch.Generator(DEVICE).manual_seed(1)
    images = torch.randn(4, BATCH, 3, SIDE, SIDE, generator=gen)
    coarse = torch.randint(0, C, (4, BATCH, 1, SIDE // 16, SIDE // 16), generator=gen).float()
    masks = F.interpolate(coarse.flatten(0, 1), scale_factor=16).long().view(4, BATCH, SIDE, SIDE)
    inter, union = torch.zeros(C, dtype=torch.int64), torch.zeros(C, dtype=torch.int64)
    conf = torch.zeros(C * C, dtype=torch.int64)
    ones = torch.ones(BATCH * SIDE * SIDE, dtype=torch.int64)

timer = StepTimer()
with torch.inference_mode():
    for i in range(args.steps):
        timer.tick()
        with bf16():
            pred = net(images[i % 4]).argmax(1)
        gt = masks[i % 4]
        if args.variant == VARIANT:  # one scatter-add into a C x C confusion matrix
            conf.scatter_add_(0, (gt * C + pred).flatten(), ones)
        else:
            for c in range(C):
                p, g = pred == c, gt == c
                inter[c] += (p & g).sum()
                union[c] += (p | g).sum()
        timer.end()
if args.variant == VARIANT:
    m = conf.view(C, C)  # rows: ground truth, columns: prediction
    inter, union = m.diagonal(), m.sum(0) + m.sum(1) - m.diagonal()
seen = union > 0
miou = (inter[seen].double() / union[seen].double()).mean()
timer.report(f"segmentation_per_class_iou_loop variant={args.variant or 'baseline'} "
             f"intersections {int(inter.sum())} unions {int(union.sum())} mIoU {miou.item():.6f}")
