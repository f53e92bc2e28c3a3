"""Fine-tuning a classifier head on a "frozen" encoder whose parameters still require grad (only the head is in the optimizer).

Baseline: the optimizer holds the head's parameters only, but the 12-layer encoder's parameters keep
`requires_grad=True`, so every backward runs through the whole encoder (input and weight gradients,
accumulated into `.grad` tensors nobody reads). Variant `freeze`: `body.requires_grad_(False)`, so
autograd records only the head. Both train the same head on the same features: same losses.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("freeze",)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda = C["CUDA"]
    dim, heads, layers, classes = (1024, 16, 12, 1000) if cuda else (64, 4, 2, 10)
    batch, seq = (32, 256) if cuda else (4, 16)
    torch.manual_seed(0)
    body, head, _ = C["encoder"](dim, heads, layers, classes)
    if args.variant == "freeze":
        body.requires_grad_(False)
    opt = C["adamw"](list(head.parameters()))
    g = torch.Generator(device=C["DEVICE"]).manual_seed(1)
    feats = [torch.randn(batch, seq, dim, device=C["DEVICE"], generator=g) for _ in range(4)]
    labels = [torch.randint(0, classes, (batch,), device=C["DEVICE"], generator=g) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        with C["bf16"]():
            pooled = body(feats[i % 4]).mean(1)
            return F.cross_entropy(head(pooled).float(), labels[i % 4])

    C["train"]("frozen_backbone", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
