"""LoRA fine-tuning (rank 16) of a frozen bf16 feed-forward stack (4 residual blocks of two 4,096 x 4,096 Linears,
8,192 tokens per step) whose adapted Linear forms the dense weight `W + s * (B @ A)` on every call: a K = 16 GEMM
writes a 4,096 x 4,096 delta, and the backward runs a full 4,096 x 4,096 x 8,192 weight-gradient GEMM for the
merged weight, only to project it down to the rank-16 factors."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANT = "factored_lora"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# width, rank, residual blocks, tokens per step
DIM, RANK, BLOCKS, TOKENS = (4096, 16, 4, 8192) if CUDA else (64, 4, 2, 32)
SCALE = 2.0  # alpha / rank


class LoRALinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(DIM, DIM) / DIM ** 0.5
        self.weight = nn.Parameter(w.to(torch.bfloat16) if CUDA else w, requires_grad=False)  # frozen base
        self.lora_a = nn.Parameter(torch.randn(RANK, DIM) / DIM ** 0.5)
        self.lora_b = nn.Parameter(torch.randn(DIM, RANK) * 0.01)  # small, not zero: both factors train at once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if args.variant == VARIANT:
            return F.linear(x, self.weight) + SCALE * F.linear(F.linear(x, self.lora_a), self.lora_b)
        return F.linear(x, self.weight + SCALE * (self.lora_b @ self.lora_a))  # dense merged weight per call


with torch.device(DEVICE):
    norms = nn.ModuleList(nn.LayerNorm(DIM) for _ in range(BLOCKS))
    ups = nn.ModuleList(LoRALinear() for _ in range(BLOCKS))
    downs = nn.ModuleList(LoRALinear() for _ in range(BLOCKS))
    for mod in norms:
        mod.requires_grad_(False)
    gen = torch.Generator(DEVICE).manual_seed(1)
    inputs = torch.randn(4, TOKENS, DIM, generator=gen)
    targets = torch.randn(4, TOKENS, DIM, generator=gen)
opt = adamw([p for m in (*ups, *downs) for p in (m.lora_a, m.lora_b)])


def loss_of(i: int) -> torch.Tensor:
    with bf16():
        x = inputs[i % 4]
        for n, up, down in zip(norms, ups, downs, strict=True):
            x = x + down(F.gelu(up(n(x))))
    return F.mse_loss(x.float(), targets[i % 4])


train("lora_merged_delta", args.variant, args.steps, opt, loss_of)
