"""Shared pieces of the fourth held-out set: the third set's device, options, timer, AdamW, encoder and training loop, and an attention block."""

import runpy
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_third = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout3" / "_common.py"))
CUDA: bool = _third["CUDA"]
DEVICE: str = _third["DEVICE"]
options = _third["options"]
StepTimer = _third["StepTimer"]
adamw = _third["adamw"]
train = _third["train"]
encoder = _third["encoder"]


class AttnBlock(nn.Module):
    """Pre-norm self-attention (q/k/v from one Linear, heads split; `attend(q, k, v)` on (B, H, T, D)) and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(attend(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))
