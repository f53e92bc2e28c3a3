"""Protein contact-map training whose pair head runs a Linear over the concatenation of every residue pair.

Workload: fine-tuning a contact-prediction head on a small protein language model: 25 amino-acid
tokens, learned positions, 4 pre-norm encoder layers of width 512 (8 heads of 64, SDPA, GELU MLP
2048), final LayerNorm; 8 proteins of 384 residues per step (synthetic sequences and contact maps),
bf16 autocast, fused AdamW. The pair head builds `torch.cat([h_i, h_j], -1)` for all 384 x 384
pairs of each protein (B x L x L x 1024: 1.18M pair rows, 4.8 GB in float32 from the LayerNorm),
then Linear(1024 -> 256), ReLU, Linear(256 -> 1); binary cross-entropy on the pairs at sequence
separation of at least 6. The first pair Linear is a GEMM with M = B x L x L rows whose inputs vary
only per residue.

Variant `split_weight`: the same Linear split into its two halves, applied per residue (two GEMMs
with M = B x L = 3,072 rows, the bias in the second) and broadcast-added over the pairs,
`a[:, :, None] + b[:, None, :]`; the same function, no concatenated tensor.

Variant `compiled` (extra, timed but not recorded): the baseline model under `torch.compile`
(default mode).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, PAIR, LENGTH, BATCH = 512, 8, 4, 256, 384, 8
else:
    DIM, HEADS, LAYERS, PAIR, LENGTH, BATCH = 32, 4, 2, 16, 24, 2
VOCAB, MIN_SEP = 25, 6


class EncoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ContactModel(nn.Module):
    def __init__(self, split: bool) -> None:
        super().__init__()
        self.split = split
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(LENGTH, DIM) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.pair1 = nn.Linear(2 * DIM, PAIR)
        self.pair2 = nn.Linear(PAIR, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, L) -> contact logits (B, L, L)."""
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for layer in self.layers:
            x = layer(x)
        h = self.norm(x)
        b, n, d = h.shape
        if self.split:
            w_i, w_j = self.pair1.weight[:, :d], self.pair1.weight[:, d:]
            a = F.linear(h, w_i)
            c = F.linear(h, w_j, self.pair1.bias)
            z = a[:, :, None] + c[:, None, :]
        else:
            pairs = torch.cat([h[:, :, None].expand(b, n, n, d), h[:, None, :].expand(b, n, n, d)], -1)
            z = self.pair1(pairs)
        return self.pair2(F.relu(z)).squeeze(-1)


def make_proteins(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences and symmetric contact maps with local and some long-range contacts."""
    n = 4 * BATCH
    ids = torch.randint(0, 20, (n, LENGTH), device=DEVICE, generator=gen)
    coords = torch.cumsum(torch.randn(n, LENGTH, 3, device=DEVICE, generator=gen) * 2.0, 1)
    dist = torch.cdist(coords, coords)
    return ids, (dist < 8.0).float()


def main() -> None:
    args = options(__doc__, ("split_weight", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ContactModel(split=args.variant == "split_weight")
    net = torch.compile(model) if args.variant == "compiled" else model
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids, contacts = make_proteins(gen)
    idx = torch.arange(LENGTH, device=DEVICE)
    keep = ((idx[None, :] - idx[:, None]) >= MIN_SEP).float()  # upper triangle at separation >= 6

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for step in range(args.steps):
        timer.tick()
        first = (step * BATCH) % ids.shape[0]
        batch, target = ids[first:first + BATCH], contacts[first:first + BATCH]
        with bf16():
            logits = net(batch)
        loss = (F.binary_cross_entropy_with_logits(logits.float(), target, reduction="none") * keep).sum() / (
            keep.sum() * BATCH)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"contact_pair_concat variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
