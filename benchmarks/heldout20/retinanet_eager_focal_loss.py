"""RetinaNet-style dense classification head trained with torchvision's sigmoid focal loss run eagerly.

Baseline: the classification subnet (4 x conv3x3 256 + a conv to 9 anchors x 80 classes) on cached
P3 features (16 images, 80 x 80) and the focal loss written as torchvision's `sigmoid_focal_loss`
(sigmoid, BCE-with-logits, p_t, (1 - p_t) ** gamma, alpha_t, sum) in eager mode: ~15 elementwise
kernels forward and more backward, each over the 16 x 57,600 x 80 = 73.7 M logits in float32.
Variant `compiled_loss`: the same loss function wrapped in `torch.compile` (default mode): inductor
fuses the chain into a few kernels forward and backward. The script defines everything it compiles.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, bf16, options, train
from torch import nn

BATCH, CIN, HF, WF, ANCHORS, CLASSES, BANK = (16, 256, 80, 80, 9, 80, 2) if CUDA else (2, 16, 8, 8, 3, 5, 2)


class ClassSubnet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(4):
            layers += [nn.Conv2d(CIN, CIN, 3, padding=1), nn.ReLU()]
        self.tower = nn.Sequential(*layers)
        self.cls = nn.Conv2d(CIN, ANCHORS * CLASSES, 3, padding=1)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        out = self.cls(self.tower(f))  # (B, A * K, H, W)
        return out.permute(0, 2, 3, 1).reshape(f.shape[0], -1, CLASSES)  # (B, H * W * A, K)


def sigmoid_focal_loss(logits: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0) -> torch.Tensor:
    """torchvision.ops.sigmoid_focal_loss with reduction="sum", on float32 logits."""
    logits = logits.float()
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum()


def main() -> None:
    args = options(__doc__, ("compiled_loss",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        net = ClassSubnet()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, **({"fused": True} if CUDA else {}))
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    n_anchor = HF * WF * ANCHORS
    feats, targets, num_pos = [], [], []
    for _ in range(BANK):  # separate tensors (no views into one bank: the compiled loss sees fresh inputs)
        feats.append(torch.randn(BATCH, CIN, HF, WF, generator=gen, device=DEVICE))
        # anchor labels: about 2 % positives of a random class, the rest background, as one-hot targets
        cls = torch.randint(0, CLASSES, (BATCH, n_anchor), generator=gen, device=DEVICE)
        pos = torch.rand(BATCH, n_anchor, generator=gen, device=DEVICE) < 0.02
        targets.append(F.one_hot(cls, CLASSES).float() * pos[..., None])
        num_pos.append(pos.sum().clamp(min=1).float())
    loss_fn = torch.compile(sigmoid_focal_loss) if args.variant == "compiled_loss" else sigmoid_focal_loss

    def loss_of(i: int) -> torch.Tensor:
        k = i % BANK
        with bf16():
            logits = net(feats[k])
        return loss_fn(logits, targets[k]) / num_pos[k]

    train("retinanet_eager_focal_loss", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
