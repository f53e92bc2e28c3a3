"""DP-SGD training of an MLP classifier on flattened 32 x 32 x 3 images, per-sample gradients computed one sample at a time.

Model 3072 -> 1024 -> 1024 -> 1024 -> 10 (ReLU, float32, 5.3M weights), 128 samples per step. DP-SGD:
each sample's gradient is clipped to L2 norm 1.0 (over all parameters), the clipped gradients are
summed, Gaussian noise (sigma 0.8, from a seeded device generator) is added, the sum divided by the
batch and applied by SGD with momentum. Baseline: a Python loop over the 128 samples, each a batch-1
forward, `torch.autograd.grad`, a norm and the scaled accumulation into per-parameter sums. Variant
`vmap`: all per-sample gradients at once with `torch.func.vmap(torch.func.grad(loss))` over
`functional_call`, the norms and clip factors as (128,) tensors, the clipped sum as one weighted
reduction per parameter.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.func import functional_call, grad, vmap

CLIP, SIGMA = 1.0, 0.8


def per_sample_loop(model: nn.Module, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Sum over samples of the clipped per-sample gradients, and the summed loss."""
    sums = [torch.zeros_like(p) for p in params]
    loss_sum = torch.zeros((), device=x.device)
    for j in range(x.size(0)):
        loss = F.cross_entropy(model(x[j:j + 1]), y[j:j + 1])
        grads = torch.autograd.grad(loss, params)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        factor = (CLIP / (norm + 1e-6)).clamp(max=1.0)
        for s, g in zip(sums, grads, strict=True):
            s.add_(g * factor)
        loss_sum += loss.detach()
    return sums, loss_sum


def per_sample_vmap(model: nn.Module, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The same sums from vectorised per-sample gradients."""
    names = [n for n, _ in model.named_parameters()]
    detached = {n: p.detach() for n, p in zip(names, params, strict=True)}

    def loss_one(pd: dict[str, torch.Tensor], xj: torch.Tensor, yj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = F.cross_entropy(functional_call(model, pd, (xj.unsqueeze(0),)), yj.unsqueeze(0))
        return loss, loss

    grads, losses = vmap(grad(loss_one, has_aux=True), in_dims=(None, 0, 0))(detached, x, y)
    per = [grads[n] for n in names]
    norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in per]), dim=0)
    factor = (CLIP / (norms + 1e-6)).clamp(max=1.0)
    return [torch.tensordot(factor, g, dims=1) for g in per], losses.sum()


def main() -> None:
    args = options(__doc__, ("vmap",)).parse_args()
    batch, feat, hidden, classes = (128, 3072, 1024, 10) if CUDA else (6, 48, 32, 10)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = nn.Sequential(nn.Linear(feat, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                              nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))
        xs = torch.randn(4, batch, feat)
        ys = torch.randint(0, classes, (4, batch))
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    noise_gen = torch.Generator(device=DEVICE).manual_seed(1)
    clipped_sum = per_sample_vmap if args.variant == "vmap" else per_sample_loop
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        sums, loss_sum = clipped_sum(model, params, xs[i % 4], ys[i % 4])
        for p, s in zip(params, sums, strict=True):
            noise = torch.randn(p.shape, generator=noise_gen, device=DEVICE) * (SIGMA * CLIP)
            p.grad = (s + noise) / batch
        opt.step()
        total += loss_sum / batch
        timer.end()
    timer.report(f"dp_per_sample variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
