"""Large-batch ViT-style classifier trained with a hand-written LARS (apex LARC style) that loops over the parameters.

Baseline: for each of the 150 parameter tensors, `norm()` of the weight and of the gradient, Python
`if param_norm != 0 and grad_norm != 0` and `min(adaptive_lr / lr, 1)` (three host syncs per tensor),
weight decay and the trust ratio applied to the gradient, then an SGD-momentum update, each with its
own small kernels. Variant `foreach`: the same arithmetic on the device with no host read: the norms
by `torch._foreach_norm`, the trust ratios of all tensors at once on the stacked norms
(`torch.where` instead of the Python `if`, `clamp(max=1)` instead of `min`), and the gradient scaling
and momentum update as `torch._foreach_*` calls.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

LR, MOMENTUM, WD, TRUST, EPS = 0.05, 0.9, 1e-4, 0.02, 1e-8


class ViT(nn.Module):
    """Patch features -> width `dim` -> pre-norm `nn.TransformerEncoder` -> mean pool -> classes."""

    def __init__(self, feat: int, dim: int, heads: int, layers: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(feat, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(self.embed(x))).mean(1))


@torch.no_grad()
def lars_loop(params: list[nn.Parameter], bufs: list[torch.Tensor]) -> None:
    """apex-LARC-style trust ratio per tensor (Python control flow on tensor values), then SGD momentum."""
    for p, buf in zip(params, bufs, strict=True):
        g = p.grad
        assert g is not None
        param_norm, grad_norm = torch.norm(p), torch.norm(g)
        if param_norm != 0 and grad_norm != 0:
            adaptive_lr = TRUST * param_norm / (grad_norm + param_norm * WD + EPS)
            adaptive_lr = min(adaptive_lr / LR, 1)
            g += WD * p
            g *= adaptive_lr
        buf.mul_(MOMENTUM).add_(g)
        p.add_(buf, alpha=-LR)


@torch.no_grad()
def lars_foreach(params: list[nn.Parameter], bufs: list[torch.Tensor]) -> None:
    """The same update with every decision on the device and multi-tensor kernels."""
    grads = [p.grad for p in params]
    assert all(g is not None for g in grads)
    pn, gn = torch.stack(torch._foreach_norm(params)), torch.stack(torch._foreach_norm(grads))  # type: ignore[arg-type]
    ok = (pn != 0) & (gn != 0)
    adaptive = torch.clamp(TRUST * pn / (gn + pn * WD + EPS) / LR, max=1.0)
    scale = torch.where(ok, adaptive, torch.ones_like(adaptive))
    decay = torch.where(ok, torch.full_like(pn, WD), torch.zeros_like(pn))
    torch._foreach_add_(grads, torch._foreach_mul(params, list(decay.unbind(0))))  # type: ignore[arg-type]
    torch._foreach_mul_(grads, list(scale.unbind(0)))  # type: ignore[arg-type]
    torch._foreach_mul_(bufs, MOMENTUM)
    torch._foreach_add_(bufs, grads)  # type: ignore[arg-type]
    torch._foreach_add_(params, bufs, alpha=-LR)


def main() -> None:
    args = options(__doc__, ("foreach",)).parse_args()
    batch, tokens, feat, dim, heads, layers, classes = (
        (128, 64, 768, 512, 8, 12, 1000) if CUDA else (4, 8, 24, 32, 4, 2, 10))
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ViT(feat, dim, heads, layers, classes)
        data = torch.randn(4, batch, tokens, feat)
        labels = torch.randint(0, classes, (4, batch))
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]
    step_fn = lars_foreach if args.variant == "foreach" else lars_loop
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            loss = F.cross_entropy(model(data[i % 4]).float(), labels[i % 4])
        for p in params:
            p.grad = None
        loss.backward()
        step_fn(params, bufs)
        total += loss.detach()
        timer.end()
    print(f"{len(params)} parameter tensors")
    timer.report(f"lars_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
