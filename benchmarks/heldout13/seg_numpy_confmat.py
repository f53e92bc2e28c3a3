"""Segmentation validation whose mIoU confusion matrix is built in numpy on the host every batch.

Workload: the validation loop of a Cityscapes-style semantic segmentation model: a DeepLabV3-style
network (ResNet-18-style backbone at output stride 8: dilations 2 and 4 in the last two stages, ASPP
with rates 12 / 24 / 36 and image pooling to 256 channels, a 3x3 head, 19 classes, bilinear upsampling
to full resolution), eval mode, bf16 autocast, channels_last, `torch.no_grad()`; a GPU-cached
validation set of 8 images of 512 x 1024 with uint8 label maps (255 = ignore), 4 images per step.
After each batch the predictions (`logits.argmax(1)`) and labels are copied to the host and the
confusion matrix is accumulated per image with the classic `_fast_hist` (`np.bincount` of
`19 * label + pred` over the valid pixels), as FCN-era `metrics.py` files do; mIoU at the end.

Variant `gpu_confmat`: the same counts accumulated on the GPU (`torch.bincount` of
`19 * label + pred` over the valid pixels, per batch, into a device int64 matrix) and read once at the
end; the same mIoU.
"""

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

CLASSES, IGNORE = 19, 255
if CUDA:
    HEIGHT, WIDTH, WIDTHS, VAL_IMAGES, BATCH = 512, 1024, (64, 128, 256, 512), 8, 4
else:
    HEIGHT, WIDTH, WIDTHS, VAL_IMAGES, BATCH = 64, 128, (8, 16, 16, 32), 4, 2
ASPP_DIM = 256 if CUDA else 16


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, padding=dilation, dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


def conv_bn_relu(cin: int, cout: int, k: int, dilation: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=dilation * (k // 2), dilation=dilation, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ASPP(nn.Module):
    def __init__(self, cin: int, cout: int, rates: tuple[int, ...] = (12, 24, 36)) -> None:
        super().__init__()
        self.branches = nn.ModuleList([conv_bn_relu(cin, cout, 1)] + [conv_bn_relu(cin, cout, 3, r) for r in rates])
        self.pool = conv_bn_relu(cin, cout, 1)
        self.project = conv_bn_relu(cout * (len(rates) + 2), cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(F.adaptive_avg_pool2d(x, 1)).expand(-1, -1, *x.shape[-2:])
        return self.project(torch.cat([b(x) for b in self.branches] + [pooled], 1))


class DeepLabV3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        c1, c2, c3, c4 = WIDTHS
        self.stem = nn.Sequential(nn.Conv2d(3, c1, 7, 2, 3, bias=False), nn.BatchNorm2d(c1), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.layer1 = nn.Sequential(BasicBlock(c1, c1), BasicBlock(c1, c1))
        self.layer2 = nn.Sequential(BasicBlock(c1, c2, stride=2), BasicBlock(c2, c2))
        self.layer3 = nn.Sequential(BasicBlock(c2, c3, dilation=2), BasicBlock(c3, c3, dilation=2))
        self.layer4 = nn.Sequential(BasicBlock(c3, c4, dilation=4), BasicBlock(c4, c4, dilation=4))
        self.aspp = ASPP(c4, ASPP_DIM)
        self.head = nn.Sequential(conv_bn_relu(ASPP_DIM, ASPP_DIM, 3), nn.Conv2d(ASPP_DIM, CLASSES, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return F.interpolate(self.head(self.aspp(x)), size=size, mode="bilinear", align_corners=False)


def _fast_hist(label_true: np.ndarray, label_pred: np.ndarray, n_class: int) -> np.ndarray:
    mask = (label_true >= 0) & (label_true < n_class)
    return np.bincount(n_class * label_true[mask].astype(int) + label_pred[mask], minlength=n_class**2).reshape(n_class, n_class)


def miou(hist: np.ndarray) -> tuple[float, float]:
    """Mean IoU over the classes present, and pixel accuracy."""
    with np.errstate(divide="ignore", invalid="ignore"):
        iu = np.diag(hist) / (hist.sum(1) + hist.sum(0) - np.diag(hist))
    return float(np.nanmean(iu)), float(np.diag(hist).sum() / hist.sum())


def make_val_set(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and label maps of blocky regions (labels at 1/32 resolution, upsampled), ~5 % ignore."""
    images = torch.randint(0, 256, (VAL_IMAGES, 3, HEIGHT, WIDTH), dtype=torch.uint8, device=DEVICE, generator=gen)
    coarse = torch.randint(0, CLASSES, (VAL_IMAGES, 1, HEIGHT // 32, WIDTH // 32), device=DEVICE, generator=gen)
    ignore = torch.rand(VAL_IMAGES, 1, HEIGHT // 32, WIDTH // 32, device=DEVICE, generator=gen) < 0.05
    coarse = torch.where(ignore, torch.full_like(coarse, IGNORE), coarse)
    labels = F.interpolate(coarse.float(), size=(HEIGHT, WIDTH), mode="nearest")[:, 0].to(torch.uint8)
    return images, labels


def main() -> None:
    args = options(__doc__, ("gpu_confmat",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = DeepLabV3().eval()
    if CUDA:
        model = model.to(memory_format=torch.channels_last)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    images, labels = make_val_set(gen)
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255

    hist = np.zeros((CLASSES, CLASSES), dtype=np.int64)
    hist_gpu = torch.zeros(CLASSES * CLASSES, dtype=torch.int64, device=DEVICE)
    timer = StepTimer()
    with torch.no_grad():
        for step in range(args.steps):
            timer.tick()
            first = (step * BATCH) % VAL_IMAGES
            img, lbl = images[first:first + BATCH], labels[first:first + BATCH]
            x = ((img.float() - mean) / std).contiguous(memory_format=torch.channels_last)
            with bf16():
                logits = model(x)
            pred = logits.argmax(1)
            if args.variant == "gpu_confmat":
                gt = lbl.long()
                valid = gt < CLASSES
                hist_gpu += torch.bincount(CLASSES * gt[valid] + pred[valid], minlength=CLASSES**2)
            else:
                for lt, lp in zip(lbl.cpu().numpy(), pred.cpu().numpy(), strict=True):
                    hist += _fast_hist(lt.flatten(), lp.flatten(), CLASSES)
            timer.end()
    if args.variant == "gpu_confmat":
        hist = hist_gpu.view(CLASSES, CLASSES).cpu().numpy()
    m, acc = miou(hist)
    timer.report(f"seg_numpy_confmat variant={args.variant or 'baseline'} mIoU {m:.5f} pixel acc {acc:.5f} "
                 f"pixels {int(hist.sum())}")


if __name__ == "__main__":
    main()
