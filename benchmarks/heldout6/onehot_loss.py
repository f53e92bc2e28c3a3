"""Language-model loss written as `-(one_hot(y) * log_softmax(logits.float())).sum(-1).mean()` over a 128k vocabulary.

One pre-norm block (width 1024, 16 heads, causal SDPA, GELU MLP 4096) between an embedding and an
untied head over a 128,256-token vocabulary (Llama 3's), 8 x 1024 tokens, bf16 autocast, fused
AdamW. Baseline: the loss above, as soft-target / label-smoothing code writes it: `F.one_hot`
makes an int64 (8192, 128256) tensor (8.4 GB), the float32 logits, their log-softmax and the
product are further 4.2 GB tensors, and backward multiplies by the one-hot again. Variants:
`cross_entropy` (`F.cross_entropy(logits, y)`: log-softmax + gather, no one-hot), `compiled` (the
baseline's own loss function under `torch.compile`, so inductor fuses it into reductions over
the logits). The same loss up to rounding.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("cross_entropy", "compiled")


def onehot_nll(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood through a dense one-hot target."""
    return -(F.one_hot(y, logits.shape[-1]) * F.log_softmax(logits.float(), -1)).sum(-1).mean()


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    dim, heads, vocab = (1024, 16, 128256) if cuda else (64, 4, 1000)
    batch, seq = (8, 1024) if cuda else (2, 32)
    torch.manual_seed(0)
    emb, block = nn.Embedding(vocab, dim).to(dev), C["AttnBlock"](dim, heads).to(dev)
    norm, head = nn.LayerNorm(dim).to(dev), nn.Linear(dim, vocab, bias=False).to(dev)
    opt = C["adamw"]([*emb.parameters(), *block.parameters(), *norm.parameters(), *head.parameters()])
    loss_fn = {"cross_entropy": F.cross_entropy, "compiled": torch.compile(onehot_nll, dynamic=False)}.get(args.variant or "", onehot_nll)
    g = torch.Generator(device=dev).manual_seed(1)
    data = [torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        tokens = data[i % 4]
        with C["bf16"]():
            logits = head(norm(block(emb(tokens[:, :-1]), causal)))
            return loss_fn(logits.flatten(0, 1), tokens[:, 1:].flatten())

    C["train"]("onehot_loss", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
