"""Serving prefill that computes (and upcasts to float32) the vocabulary logits of every prompt position when only the last one picks the next token.

GPT-style decoder (8 pre-norm blocks, width 2048, 16 heads of 128, causal SDPA, GELU MLP 8192),
vocab 151,936, bf16 weights, inference mode. Each step prefills a new batch of 8 prompts of 2,048
tokens (4 fixed batches in turn) and takes the next token of each as the argmax at the last
position. Baseline: `logits = head(norm(h)).float()` over all 16,384 positions (a 10 GB float32
tensor), then `logits[:, -1].argmax(-1)`. Variant `last_only`: the final norm and the head on
`h[:, -1:]` alone (what `logits_to_keep=1` does). The same tokens (up to the head GEMM's rounding).
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("last_only",)


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, heads, layers, vocab = (2048, 16, 8, 151936) if cuda else (64, 4, 2, 1000)
    batch, seq = (8, 2048) if cuda else (2, 32)
    torch.manual_seed(0)
    emb, norm, head = nn.Embedding(vocab, dim), nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)
    blocks = nn.ModuleList([C["AttnBlock"](dim, heads) for _ in range(layers)])
    dt = torch.bfloat16 if cuda else torch.float32
    for m in (emb, norm, head, blocks):
        m.to(dev, dt)
    g = torch.Generator(device=dev).manual_seed(1)
    prompts = [torch.randint(0, vocab, (batch, seq), device=dev, generator=g) for _ in range(4)]
    timer, total = C["StepTimer"](), torch.zeros((), dtype=torch.int64, device=dev)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            h = emb(prompts[i % 4])
            for blk in blocks:
                h = blk(h, causal)
            if args.variant == "last_only":
                logits = head(norm(h[:, -1:])).float()
            else:
                logits = head(norm(h)).float()
            total += logits[:, -1].argmax(-1).sum()
            del logits, h
            timer.end()
    timer.report(f"prefill_logits variant={args.variant or 'baseline'} token checksum {int(total.item())}")


if __name__ == "__main__":
    main()
