"""Differentially private training (DP-SGD) whose per-example gradients come from a loop over the batch.

A readmission-risk classifier on electronic-health-record features (256 numeric features, an MLP of
three 1,024-wide ReLU layers, 2 classes, float32, fused AdamW) trained with DP-SGD: each example's
gradient is clipped to norm 1.0, the clipped gradients are summed, Gaussian noise (sigma 0.8) is
added and the sum is divided by the batch of 128. The baseline gets the per-example gradients the
way the algorithm is written down: a Python loop over the 128 examples, each a forward, a
`torch.autograd.grad` and its norm and clipped accumulation on batch size 1: ~9,000 tiny kernels and
their autograd bookkeeping per step, launch-bound.

--variant vmap_grads: torch.func's per-sample-gradient recipe, `vmap(grad_and_value(loss))` over the
batch with `functional_call`: one batched forward and backward giving (128, ...) gradients, their
norms and one weighted sum per parameter: the same clipping, noise and update.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, options
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

args = options(__doc__, ("vmap_grads",)).parse_args()
if CUDA:
    FEAT, WIDTH, DEPTH, BATCH, BANK = 256, 1024, 3, 128, 8192
else:
    FEAT, WIDTH, DEPTH, BATCH, BANK = 16, 32, 2, 6, 64
CLIP, SIGMA = 1.0, 0.8

torch.manual_seed(0)
with torch.device(DEVICE):
    layers: list[nn.Module] = [nn.Linear(FEAT, WIDTH), nn.ReLU()]
    for _ in range(DEPTH - 1):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(WIDTH, 2))
params = dict(model.named_parameters())
opt = adamw(list(params.values()))
gen = torch.Generator(DEVICE).manual_seed(23)
feats = torch.randn(BANK, FEAT, device=DEVICE, generator=gen)
labels = (feats[:, :8].sum(1) + torch.randn(BANK, device=DEVICE, generator=gen) > 0).long()


def example_loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])


per_example = vmap(grad_and_value(example_loss), in_dims=(None, 0, 0))


def clip_factor(norm_sq: torch.Tensor) -> torch.Tensor:
    return (CLIP / (norm_sq.sqrt() + 1e-6)).clamp(max=1.0)


def clipped_sum(x: torch.Tensor, y: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The sum over the batch of the clipped per-example gradients, and the summed loss."""
    if args.variant == "vmap_grads":
        grads, losses = per_example({k: v.detach() for k, v in params.items()}, x, y)
        gs = list(grads.values())
        factor = clip_factor(sum(torch.linalg.vector_norm(g.flatten(1), dim=1) ** 2 for g in gs))
        return [torch.einsum("b,b...->...", factor, g) for g in gs], losses.sum()
    sums = [torch.zeros_like(p) for p in params.values()]
    loss_sum = torch.zeros((), device=DEVICE)
    for j in range(len(x)):
        loss = F.cross_entropy(model(x[j:j + 1]), y[j:j + 1])
        gs = torch.autograd.grad(loss, list(params.values()))
        factor = clip_factor(sum(torch.linalg.vector_norm(g) ** 2 for g in gs))
        for s, g in zip(sums, gs, strict=True):
            s.add_(g * factor)
        loss_sum += loss.detach()
    return sums, loss_sum


total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    rows = torch.arange(i * BATCH, (i + 1) * BATCH, device=DEVICE) % BANK
    sums, loss_sum = clipped_sum(feats[rows], labels[rows])
    for p, s in zip(params.values(), sums, strict=True):
        noise = torch.randn(p.shape, device=DEVICE, generator=gen)
        p.grad = (s + SIGMA * CLIP * noise) / BATCH
    opt.step()
    total += loss_sum / BATCH
    timer.end()
timer.report(f"ehr_dpsgd_per_sample_loop variant={args.variant or 'baseline'} "
             f"mean loss {total.item() / args.steps:.5f}")
