"""A bf16-autocast GPT whose attention is computed "for stability" in float32 with autocast disabled around SDPA.

6 pre-norm blocks (width 1024, 16 heads of 64, GELU MLP 4096), vocab 32k, 8 x 2048 tokens,
causal, fused AdamW, next-token cross-entropy. Baseline: every block's attention is
`with autocast(enabled=False): sdpa(q.float(), k.float(), v.float(), is_causal=True)`, so SDPA
gets float32 inputs (no flash kernel: memory-efficient or math attention in fp32) and its output
is cast back. Variant `bf16`: `sdpa(q, k, v, is_causal=True)` on the bf16 projections (flash).
The same model and data; losses differ by bf16 rounding of the attention on the GPU (identical on
the CPU check, which runs everything in float32).
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("bf16",)


def attend_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    with torch.autocast(q.device.type, enabled=False):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).to(q.dtype)


def attend_native(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, heads, layers, vocab = (1024, 16, 6, 32000) if cuda else (64, 4, 2, 100)
    batch, seq = (8, 2048) if cuda else (2, 32)
    torch.manual_seed(0)
    emb, norm, head = nn.Embedding(vocab, dim).to(dev), nn.LayerNorm(dim).to(dev), nn.Linear(dim, vocab).to(dev)
    blocks = nn.ModuleList([C["AttnBlock"](dim, heads) for _ in range(layers)]).to(dev)
    params = [*emb.parameters(), *blocks.parameters(), *norm.parameters(), *head.parameters()]
    opt = C["adamw"](params)
    attend = attend_native if args.variant == "bf16" else attend_fp32
    g = torch.Generator(device=dev).manual_seed(1)
    data = [torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        tokens = data[i % 4]
        with C["bf16"]():
            x = emb(tokens[:, :-1])
            for blk in blocks:
                x = blk(x, attend)
            logits = head(norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    C["train"]("fp32_attention", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
