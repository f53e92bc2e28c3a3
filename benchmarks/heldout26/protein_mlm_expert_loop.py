"""Protein masked-LM pretraining whose mixture-of-experts layers loop over their 16 experts in Python.

An ESM-2-style protein language model (masked-residue prediction over a 33-token alphabet, 15 %
of residues masked; 8 sequences x 512 residues per step) with 4 pre-norm blocks of width 512
(8 heads, SDPA); as in GShard and Switch, every other block's feed-forward layer is a mixture of
experts: 16 GELU experts of hidden 1,024, softmax router, top-2 per residue with renormalised
weights; the other blocks have a dense GELU MLP of 2,048; bf16 autocast, fused AdamW. Tokens are
dispatched without device synchronisation in the loop: (residue, expert) pairs are sorted by
expert and the per-expert counts are read once per layer.

Baseline: the experts are an `nn.ModuleList` and the layer runs them as the Hugging Face MoE blocks
do, `for e, expert in enumerate(self.experts)`: gather the expert's ~512 residues, its two Linears
and GELU, scale by the router weight, `index_add_` into the output: ~12 small kernels per expert in
the forward (autocast's casts included) and ~20 in the backward, ~1,000 launches per step for
well under 1 ms of expert GEMMs.

Variant `batched_experts`: the same experts' weights stacked (E x D x H) once at build time, and
the layer runs all experts at once: residues scattered into a capacity-padded (E, C, D) buffer (C =
the busiest expert's count), two `torch.baddbmm` calls and a GELU, gathered back and added with one
`index_add_` (the GShard / Switch layout; grouped GEMMs would skip the padding). The same initial
weights, routing, products and updates (batched instead of single GEMMs: last bf16 bits).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("batched_experts",)
if CUDA:
    LAYERS, DIM, HEADS, EXPERTS, TOP, HIDDEN, SEQS, LENGTH = 4, 512, 8, 16, 2, 1024, 8, 512
else:  # a tiny CPU check of the script
    LAYERS, DIM, HEADS, EXPERTS, TOP, HIDDEN, SEQS, LENGTH = 2, 32, 2, 4, 2, 32, 2, 16
ALPHABET, MASK_ID, POOL = 33, 32, 4


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    """Top-k routed experts; `batched` stacks their weights and runs them with baddbmm."""

    def __init__(self, batched: bool) -> None:
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        experts = nn.ModuleList(Expert() for _ in range(EXPERTS))
        self.batched = batched
        if batched:  # the same initial weights, stacked
            with torch.no_grad():
                self.w1 = nn.Parameter(torch.stack([e.fc1.weight.T for e in experts]))  # (E, D, H)
                self.b1 = nn.Parameter(torch.stack([e.fc1.bias for e in experts]))
                self.w2 = nn.Parameter(torch.stack([e.fc2.weight.T for e in experts]))  # (E, H, D)
                self.b2 = nn.Parameter(torch.stack([e.fc2.bias for e in experts]))
        else:
            self.experts = experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, DIM)
        weights, chosen = self.router(x).float().softmax(-1).topk(TOP, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).flatten()
        order = chosen.flatten().argsort(stable=True)  # (residue, expert) pairs grouped by expert
        counts = torch.bincount(chosen.flatten(), minlength=EXPERTS)
        sizes = counts.tolist()  # one read per layer
        token = order // TOP
        out = torch.zeros_like(x)
        if not self.batched:
            start = 0
            for e, expert in enumerate(self.experts):
                end = start + sizes[e]
                rows = token[start:end]
                out.index_add_(0, rows, expert(x[rows]) * weights[order[start:end], None])
                start = end
            return out.view(shape)
        cap = max(sizes)
        expert = chosen.flatten()[order]
        slot = expert * cap + torch.arange(order.numel(), device=x.device) - (counts.cumsum(0) - counts)[expert]
        buf = x.new_zeros(EXPERTS * cap, DIM).index_put((slot,), x[token])
        h = F.gelu(torch.baddbmm(self.b1[:, None], buf.view(EXPERTS, cap, DIM), self.w1))
        h = torch.baddbmm(self.b2[:, None], h, self.w2).view(EXPERTS * cap, DIM)
        return out.index_add(0, token, h[slot] * weights[order, None]).view(shape)


class Block(nn.Module):
    def __init__(self, batched: bool, moe: bool) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = MoE(batched) if moe else nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class ProteinMLM(nn.Module):
    def __init__(self, batched: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(ALPHABET, DIM), nn.Parameter(torch.randn(LENGTH, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(batched, moe=i % 2 == 1) for i in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, ALPHABET)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ProteinMLM(args.variant == "batched_experts")
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # residues 4..23 (the 20 amino acids) with their natural frequencies, roughly; 15 % masked
    freq = torch.rand(20, generator=gen, device=DEVICE) + 0.3
    seqs = torch.multinomial(freq, POOL * SEQS * LENGTH, replacement=True, generator=gen).view(POOL, SEQS, LENGTH) + 4
    masked = torch.rand(POOL, SEQS, LENGTH, generator=gen, device=DEVICE) < 0.15
    inputs = seqs.masked_fill(masked, MASK_ID)
    targets = seqs.masked_fill(~masked, -100)

    def loss_of(i: int) -> torch.Tensor:
        with bf16():
            logits = model(inputs[i % POOL])
        return F.cross_entropy(logits.flatten(0, 1).float(), targets[i % POOL].flatten(), ignore_index=-100)

    train("protein_mlm_expert_loop", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
