"""A `torch.compile`d causal LM whose blocks each end with a defensive `if not torch.isfinite(x).all(): raise`.

Baseline: the check is Python control flow on a tensor value inside the compiled forward, so dynamo
breaks the graph after every block (the model runs as one compiled graph per block plus resume
frames) and the `bool()` of the check is a host sync after each block's forward. Variant `flag`:
each block returns `bad | ~isfinite(x).all()` instead of branching, the model is compiled with
`fullgraph=True` (one forward graph, one backward graph), the flags are or-ed on the device across
steps and read once after the last step (raising there if a non-finite value was ever seen).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


class CheckedBlock(nn.Module):
    """Pre-norm causal self-attention + GELU MLP; the baseline raises on a non-finite output, the variant returns a flag."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, bad: torch.Tensor | None = None) -> "torch.Tensor | tuple[torch.Tensor, torch.Tensor]":
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        x = x + self.down(F.gelu(self.up(self.n2(x))))
        if bad is not None:
            return x, bad | ~torch.isfinite(x).all()
        if not torch.isfinite(x).all():  # left in from chasing a divergence
            raise FloatingPointError("non-finite activations")
        return x


class LM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, flag: bool) -> None:
        super().__init__()
        self.flag = flag
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(CheckedBlock(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> "torch.Tensor | tuple[torch.Tensor, torch.Tensor]":
        x = self.emb(ids)
        bad = torch.zeros((), dtype=torch.bool, device=ids.device)
        for blk in self.blocks:
            if self.flag:
                x, bad = blk(x, bad)
            else:
                x = blk(x)
        logits = self.head(self.norm(x))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return (loss, bad) if self.flag else loss


def main() -> None:
    args = options(__doc__, ("flag",)).parse_args()
    batch, seq, vocab, dim, heads, layers = (8, 512, 16384, 512, 8, 4) if CUDA else (2, 16, 64, 32, 4, 3)
    flag = args.variant == "flag"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LM(vocab, dim, heads, layers, flag)
        data = torch.randint(0, vocab, (4, batch, seq + 1))
    compiled = torch.compile(model, fullgraph=flag)
    opt = adamw(list(model.parameters()))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    seen_bad = torch.zeros((), dtype=torch.bool, device=DEVICE)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        ids, targets = data[i % 4, :, :-1], data[i % 4, :, 1:]
        with bf16():
            out = compiled(ids, targets)
        if flag:
            loss, bad = out
            seen_bad |= bad
        else:
            loss = out
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    if seen_bad.item():
        raise FloatingPointError("non-finite activations")
    timer.report(f"compile_nancheck variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
