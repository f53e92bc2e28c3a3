"""MLP trained with AdamW whose fp32 master weights and optimizer state live on the host (optimizer offload by hand).

Baseline: every step copies each gradient to the CPU, runs `torch.optim.AdamW(foreach=True)` there on
fp32 master copies, and copies every updated weight back. Variant `gpu_fused`: the same AdamW
(same hyper-parameters) fused on the GPU's own parameters.
"""

import torch
from _common import CUDA, DEVICE, adamw, options, train
from torch import nn

VARIANTS = ("gpu_fused",)
DIM, BLOCKS, TOKENS = (1024, 12, 16384) if CUDA else (64, 2, 128)


class OffloadAdamW:
    """AdamW on host fp32 masters: grads down, step on the CPU, weights up (both pageable, blocking)."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.masters = [p.detach().to("cpu", copy=True).requires_grad_(True) for p in params]
        self.opt = torch.optim.AdamW(self.masters, lr=1e-4, foreach=True)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p, m in zip(self.params, self.masters, strict=True):
            m.grad = p.grad.to("cpu")  # type: ignore[union-attr]
        self.opt.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                p.copy_(m)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(BLOCKS):
        layers += [nn.LayerNorm(DIM), nn.Linear(DIM, DIM), nn.GELU(), nn.Linear(DIM, DIM)]
    model = nn.Sequential(*layers, nn.Linear(DIM, 1)).to(DEVICE)
    params = list(model.parameters())
    opt = adamw(params) if args.variant == "gpu_fused" else OffloadAdamW(params)
    data = [(torch.randn(TOKENS, DIM, device=DEVICE), torch.randn(TOKENS, 1, device=DEVICE)) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        x, y = data[i % 4]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            out = model(x)
        return torch.nn.functional.mse_loss(out.float(), y)

    train("offload_adam", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
