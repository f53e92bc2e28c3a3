"""Non-causal ReLU linear attention (EfficientViT style) evaluated as (phi(Q) phi(K)^T) V, materialising the T x T matrix it was meant to avoid.

Vision encoder on 4,096 patch tokens (768 features each, a 1024 px image in 16 px patches), batch 8:
a patch Linear to width 512, 4 pre-norm blocks (8 heads of 64, GELU MLP 2048) whose attention is
out = phi(Q) phi(K)^T V / (phi(Q) phi(K)^T 1) with phi = ReLU, mean pool, 1000 classes,
bf16 autocast, fused AdamW. Baseline: `a = phi(q) @ phi(k).T` (8 x 8 x 4096^2 per layer), then
`(a @ v) / a.sum(-1)`. Variant `reassociate`: `phi(q) @ (phi(k).T @ v)` over `phi(q) @ phi(k).sum(T)`:
the same sums in the other order, (64 x 64) state per head. The same loss up to rounding.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("reassociate",)
EPS = 1e-6


def quadratic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(phi(q) phi(k)^T) v, normalised by the row sums of the (T, T) matrix."""
    a = F.relu(q) @ F.relu(k).transpose(-2, -1)
    return (a @ v) / (a.sum(-1, keepdim=True) + EPS)


def reassociated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """phi(q) (phi(k)^T v), normalised by phi(q) . sum_t phi(k_t)."""
    q, k = F.relu(q), F.relu(k)
    return (q @ (k.transpose(-2, -1) @ v)) / (q @ k.sum(-2).unsqueeze(-1) + EPS)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    feat, dim, heads, layers, classes = (768, 512, 8, 4, 1000) if cuda else (24, 32, 4, 2, 10)
    batch, tokens = (8, 4096) if cuda else (2, 32)
    torch.manual_seed(0)
    embed, norm, head = nn.Linear(feat, dim).to(dev), nn.LayerNorm(dim).to(dev), nn.Linear(dim, classes).to(dev)
    blocks = nn.ModuleList([C["AttnBlock"](dim, heads) for _ in range(layers)]).to(dev)
    opt = C["adamw"]([*embed.parameters(), *blocks.parameters(), *norm.parameters(), *head.parameters()])
    attend = reassociated if args.variant == "reassociate" else quadratic
    g = torch.Generator(device=dev).manual_seed(1)
    data = [(torch.randn(batch, tokens, feat, device=dev, generator=g),
             torch.randint(0, classes, (batch,), device=dev, generator=g)) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        x, y = data[i % 4]
        with C["bf16"]():
            h = embed(x)
            for blk in blocks:
                h = blk(h, attend)
            logits = head(norm(h).mean(1))
        return F.cross_entropy(logits.float(), y)

    C["train"]("linear_attention", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
