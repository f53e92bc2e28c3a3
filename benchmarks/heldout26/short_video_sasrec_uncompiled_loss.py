"""Next-video recommendation (SASRec, full softmax over 65,536 videos) under torch.compile, its loss left in eager.

Training a SASRec-style sequential recommender for a short-video app: each user's last 128
watched videos (left-padded, id 0 = padding), 2 causal pre-norm transformer blocks of width 256
(4 heads, SDPA, GELU MLPs), learned positions, output scores against the tied video embedding
table (65,536 x 256), cross-entropy over the full catalogue at every non-padding position; 64
users per step (8,192 positions), bf16 autocast, fused AdamW. The model is wrapped with
`torch.compile` (default mode), as the tutorials show.

Baseline: `model = torch.compile(model)` and the loss written after it in eager mode:
`F.cross_entropy(model(seq).flatten(0, 1).float(), target.flatten(), ignore_index=0)`. The graph
ends at the bf16 logits (8,192 x 65,536: 1.1 GB); eager PyTorch then upcasts them to a float32
copy, runs `log_softmax` and `nll_loss` over it, and in the backward writes float32 gradients of
the same size and casts them back to bf16: ~8 full passes over 0.5 G logits per step that inductor
never sees.

Variant `loss_in_graph`: the compiled function is the model *and* its loss (`torch.compile` of a
function returning the cross-entropy), so inductor fuses the upcast, log-softmax and
negative-log-likelihood into reductions over the bf16 logits and writes their gradient in one
pass. The same model, data, loss and updates; the loss agrees to a few digits (another reduction
order).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("loss_in_graph",)
if CUDA:
    ITEMS, DIM, HEADS, LAYERS, USERS, LENGTH = 65_536, 256, 4, 2, 64, 128
else:  # a tiny CPU check of the script
    ITEMS, DIM, HEADS, LAYERS, USERS, LENGTH = 512, 32, 2, 1, 4, 16
POOL = 8


class Block(nn.Module):
    """Pre-norm causal self-attention and a GELU MLP (defined here so that Dynamo can trace it)."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class SASRec(nn.Module):
    """Video and position embeddings, causal blocks, final norm, scores against the tied video table."""

    def __init__(self) -> None:
        super().__init__()
        self.items = nn.Embedding(ITEMS, DIM, padding_idx=0)
        with torch.no_grad():
            self.items.weight.normal_(std=DIM**-0.5)[0].zero_()
        self.pos = nn.Embedding(LENGTH, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        h = self.items(seq) * DIM**0.5 + self.pos.weight
        for block in self.blocks:
            h = block(h)
        return self.norm(h) @ self.items.weight.T  # (users, length, ITEMS)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SASRec()
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # watch histories: popularity-skewed ids (1..ITEMS-1), left-padded to LENGTH + 1
    popularity = 1.0 / torch.arange(1, ITEMS, device=DEVICE, dtype=torch.float32) ** 0.8
    views = torch.multinomial(popularity, POOL * USERS * (LENGTH + 1), replacement=True, generator=gen) + 1
    views = views.view(POOL, USERS, LENGTH + 1)
    lengths = torch.randint(LENGTH // 4, LENGTH + 2, (POOL, USERS, 1), generator=gen, device=DEVICE)
    views = views.masked_fill(torch.arange(LENGTH + 1, device=DEVICE) < LENGTH + 1 - lengths, 0)

    if args.variant == "loss_in_graph":
        @torch.compile
        def step_loss(seq: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            logits = model(seq)  # under the caller's autocast
            return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=0)

        def loss_of(i: int) -> torch.Tensor:
            with bf16():
                return step_loss(views[i % POOL, :, :-1], views[i % POOL, :, 1:])
    else:
        compiled = torch.compile(model)

        def loss_of(i: int) -> torch.Tensor:
            with bf16():
                logits = compiled(views[i % POOL, :, :-1])
            return F.cross_entropy(logits.flatten(0, 1).float(), views[i % POOL, :, 1:].flatten(), ignore_index=0)

    model.train()
    train("short_video_sasrec_uncompiled_loss", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
