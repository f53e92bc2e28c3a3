"""L2 regularisation written into the loss: `wd * sum(p.pow(2).sum() for p in model.parameters())`.

A BERT-base-sized text classifier (token + position embeddings, 12-layer pre-norm
`nn.TransformerEncoder`, width 768, 12 heads, mean pool, 2 classes; ~150 parameter tensors)
fine-tuned with fused Adam under bf16 autocast, 16 x 128 tokens per step. The baseline adds an L2
penalty over every parameter tensor to the loss, as many tutorials do: per tensor a pow, a sum and an
add in the forward, and a multiply and a gradient accumulation in the backward (~1,000 small
launches and a few passes over the 110M float32 weights). Variants (the same update: the gradient of
wd * |p|^2 is 2 * wd * p, which Adam's coupled `weight_decay` adds to the gradient):
  adam_wd       no penalty in the loss; `torch.optim.Adam(..., weight_decay=2 * wd, fused=True)`
  foreach_norm  the penalty as `wd * torch.stack(torch._foreach_norm(params)).pow(2).sum()`
The printed checksum is the mean cross-entropy (the penalty left out), the same in every variant.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CUDA, DEVICE, StepTimer, bf16, encoder, options

VARIANTS = ("adam_wd", "foreach_norm")
WD = 1e-4


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dim, heads, layers, vocab, batch, seq = (768, 12, 12, 30522, 16, 128) if CUDA else (64, 4, 3, 500, 4, 16)
    body, head, body_params = encoder(dim, heads, layers, 2)
    tok, pos, norm = nn.Embedding(vocab, dim).to(DEVICE), nn.Embedding(seq, dim).to(DEVICE), nn.LayerNorm(dim).to(DEVICE)
    params = [*tok.parameters(), *pos.parameters(), *body_params, *norm.parameters()]
    params = list({id(p): p for p in params + list(head.parameters())}.values())
    decay = 2 * WD if args.variant == "adam_wd" else 0.0
    opt = torch.optim.Adam(params, lr=1e-4, weight_decay=decay, **({"fused": True} if CUDA else {}))
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    ids = torch.randint(0, vocab, (4, batch, seq), device=DEVICE, generator=gen)
    labels = torch.randint(0, 2, (4, batch), device=DEVICE, generator=gen)
    positions = torch.arange(seq, device=DEVICE)

    def penalty() -> torch.Tensor:
        if args.variant == "foreach_norm":
            return WD * torch.stack(torch._foreach_norm(params)).pow(2).sum()
        return WD * sum(p.pow(2).sum() for p in params)  # type: ignore[return-value]

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            h = body(tok(ids[i % 4]) + pos(positions))
            ce = F.cross_entropy(head(norm(h).mean(1)).float(), labels[i % 4])
        loss = ce if args.variant == "adam_wd" else ce + penalty()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += ce.detach()
        timer.end()
    timer.report(f"l2_penalty variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
