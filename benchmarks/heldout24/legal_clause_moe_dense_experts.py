"""Contract-clause classification with a mixture-of-experts encoder whose MoE layers run every expert on every token.

Fine-tuning a sparse encoder on LEDGAR-style clause types (100 labels; 8 clauses of 1,024 tokens per
step; 4 blocks of width 768, 12 heads, SDPA; every block's MLP is a mixture of 8 GELU experts of
3,072 with a top-2 softmax router, Mixtral-style renormalised weights; bf16 autocast, fused AdamW).
Baseline: the MoE layer is written densely: `torch.stack([expert(x) for expert in experts], 1)`
over all 8,192 tokens, then weighted by a gate matrix that is zero outside each token's top 2 and
summed: every expert GEMM (forward and both backward GEMMs) runs on 4x the tokens it is routed,
~7.4 TFLOP of expert work per step where ~1.9 would do.
Variant `routed_experts`: tokens are dispatched: the (token, expert) pairs are sorted by expert,
each expert runs on its own tokens only (one gather, per-expert GEMMs of ~2,048 rows), and the
weighted outputs are added back with `index_add_`; the same router, weights and sums.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("routed_experts",)
CLAUSES, TOKENS, VOCAB, LABELS = (8, 1024, 30_522, 100) if CUDA else (2, 16, 500, 100)
DIM, HEADS, LAYERS, EXPERTS, HIDDEN, TOP = (768, 12, 4, 8, 3072, 2) if CUDA else (32, 4, 2, 4, 64, 2)


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    def __init__(self, routed: bool) -> None:
        super().__init__()
        self.routed = routed
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.router(x).float().softmax(-1)  # (N, E)
        w, idx = probs.topk(TOP, -1)
        w = w / w.sum(-1, keepdim=True)
        if not self.routed:
            gates = torch.zeros_like(probs).scatter(1, idx, w)  # zero outside each token's top 2
            y = torch.stack([e(x) for e in self.experts], 1)  # (N, E, D): every expert, every token
            return (gates.to(y.dtype).unsqueeze(-1) * y).sum(1)
        flat = idx.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=EXPERTS).tolist()
        token = order // TOP
        chunks = x[token].split(counts)
        ys = torch.cat([e(c) for e, c in zip(self.experts, chunks, strict=True)])
        ys = ys * w.flatten()[order].to(ys.dtype).unsqueeze(-1)
        return torch.zeros(x.shape[0], DIM, device=x.device, dtype=ys.dtype).index_add_(0, token, ys)


class Block(nn.Module):
    def __init__(self, routed: bool) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.moe = MoE(routed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.moe(self.n2(x).reshape(b * t, d)).view(b, t, d)


class ClauseClassifier(nn.Module):
    def __init__(self, routed: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(routed) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, LABELS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(1))


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ClauseClassifier(routed=args.variant == "routed_experts")
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    batches = [(torch.randint(0, VOCAB, (CLAUSES, TOKENS), generator=gen, device=DEVICE),
                torch.randint(0, LABELS, (CLAUSES,), generator=gen, device=DEVICE)) for _ in range(4)]
    opt = adamw(list(model.parameters()))

    def loss_of(i: int) -> torch.Tensor:
        ids, labels = batches[i % len(batches)]
        with bf16():
            return F.cross_entropy(model(ids).float(), labels)

    train("legal_clause_moe_dense_experts", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
