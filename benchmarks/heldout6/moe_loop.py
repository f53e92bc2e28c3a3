"""Mixture-of-experts layers dispatched by a Python loop over the experts (`nonzero` of the router's choice, gather, expert MLP, `index_add_`), as in common eager MoE code.

4 residual MoE layers (LayerNorm, router Linear 1024 -> 16 with top-1 softmax gate, 16 experts of
Linear 1024 -> 2048, GELU, Linear 2048 -> 1024, bf16 expert math on fp32 master weights stored
stacked per layer), 16,384 tokens, MSE to fixed targets, fused AdamW. Baseline: per layer and
expert `idx = (choice == e).nonzero()` (a host sync: the count sizes the gather), two GEMMs on the
~1,024 chosen rows and an `index_add_` into the output: 16 syncs and ~300 launches per layer
forward and backward. Variant `grouped`: tokens sorted by expert (`argsort`), per-expert counts by
`scatter_add_` and `cumsum` on the GPU (no sync), each expert GEMM of the layer as one
`F.grouped_mm` over the jagged groups, the rows put back by the inverse permutation. The same
loss up to the GEMM kernels' rounding.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("grouped",)
BF16 = torch.bfloat16


class MoE(nn.Module):
    """Top-1 routed experts with stacked (experts, out, in) weights."""

    def __init__(self, dim: int, ffn: int, experts: int) -> None:
        super().__init__()
        self.norm, self.router = nn.LayerNorm(dim), nn.Linear(dim, experts)
        self.w1 = nn.Parameter(torch.randn(experts, ffn, dim) / dim ** 0.5)
        self.w2 = nn.Parameter(torch.randn(experts, dim, ffn) / ffn ** 0.5)

    def forward(self, x: torch.Tensor, grouped: bool) -> torch.Tensor:
        h = self.norm(x)
        gate, choice = self.router(h).softmax(-1).max(-1)
        hb, w1, w2 = h.to(BF16), self.w1.to(BF16), self.w2.to(BF16)
        if grouped:
            order = choice.argsort(stable=True)
            counts = torch.zeros(w1.shape[0], dtype=torch.int64, device=x.device).scatter_add_(0, choice, torch.ones_like(choice))
            offs = counts.cumsum(0).to(torch.int32)
            y = F.grouped_mm(F.gelu(F.grouped_mm(hb[order], w1.transpose(-2, -1), offs=offs)), w2.transpose(-2, -1), offs=offs)
            out = y[order.argsort()]
        else:
            out = torch.zeros_like(hb)
            for e, (w1e, w2e) in enumerate(zip(w1.unbind(0), w2.unbind(0), strict=True)):
                idx = (choice == e).nonzero().squeeze(1)
                out.index_add_(0, idx, F.linear(F.gelu(F.linear(hb[idx], w1e)), w2e))
        return x + out.float() * gate[:, None]


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, ffn, experts, layers, tokens = (1024, 2048, 16, 4, 16384) if cuda else (32, 64, 4, 2, 128)
    torch.manual_seed(0)
    moes = nn.ModuleList([MoE(dim, ffn, experts) for _ in range(layers)]).to(dev)
    opt = C["adamw"](list(moes.parameters()))
    g = torch.Generator(device=dev).manual_seed(1)
    data = [(torch.randn(tokens, dim, device=dev, generator=g), torch.randn(tokens, dim, device=dev, generator=g)) for _ in range(4)]
    grouped = args.variant == "grouped"

    def loss_of(i: int) -> torch.Tensor:
        x, y = data[i % 4]
        for moe in moes:
            x = moe(x, grouped)
        return F.mse_loss(x, y)

    C["train"]("moe_loop", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
