"""Card-fraud scoring service whose forward runs with autograd recording on: `model.eval()` but no `torch.no_grad()`.

Real-time fraud scoring of card transactions: each request carries 64 cards, each with its last 64
transactions (24 numeric features and a merchant-category id); a transaction-sequence transformer
(numeric projection + merchant-category embedding + learned positions, 32 pre-norm blocks of width
256, 8 heads, SDPA, GELU MLPs of 1,024, bf16 weights) scores the last transaction of every card. One
request per step; the fraud probabilities stay on the GPU (summed into a running total).

Baseline: the service calls `model.eval()` and then `model(...)` with gradient mode still on, as
eval() does not turn autograd off. Each of the ~900 operator calls of a forward (~360 of them launch
kernels, the rest are views) records its backward node and saves its inputs on the step's thread,
and the graph is torn down when the scores are released: extra host work per operation on a forward
that is already bound by the host (small GEMMs and element-wise kernels of a few microseconds each).

Variant `inference_mode`: the forward runs under `torch.inference_mode()` (PyTorch's tuning guide:
disable gradient calculation for inference): the same kernels, no graph recording.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, options
from torch import nn

NAME = "card_fraud_scoring_grad_recording"
VARIANTS = ("inference_mode",)

if CUDA:
    CARDS, TXNS, DIM, HEADS, DEPTH = 64, 64, 256, 8, 32
else:  # tiny check of the script on the CPU
    CARDS, TXNS, DIM, HEADS, DEPTH = 4, 8, 32, 4, 2
NUMERIC, MCC, POOL = 24, 400, 8


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class FraudScorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.numeric = nn.Linear(NUMERIC, DIM)
        self.mcc = nn.Embedding(MCC, DIM)
        self.pos = nn.Parameter(torch.randn(TXNS, DIM) * 0.02)
        self.blocks = nn.ModuleList(AttnBlock(DIM, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM)
        self.out = nn.Linear(DIM, 1)

    def forward(self, num: torch.Tensor, mcc: torch.Tensor) -> torch.Tensor:
        x = self.numeric(num) + self.mcc(mcc) + self.pos
        for blk in self.blocks:
            x = blk(x, sdpa)
        return torch.sigmoid(self.out(self.norm(x[:, -1])).squeeze(-1))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = FraudScorer().to(dtype)
    model.eval()  # the parameters keep requires_grad=True, as they do after loading a checkpoint

    gen = torch.Generator(device=DEVICE).manual_seed(25)
    nums = torch.randn(POOL, CARDS, TXNS, NUMERIC, generator=gen, device=DEVICE).to(dtype)
    mccs = torch.randint(0, MCC, (POOL, CARDS, TXNS), generator=gen, device=DEVICE)

    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        r = i % POOL
        if args.variant == "inference_mode":
            with torch.inference_mode():
                probs = model(nums[r], mccs[r])
        else:
            probs = model(nums[r], mccs[r])
        total += probs.detach().double().sum()
        del probs
        timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} fraud-probability sum {total.item():.6f}")


if __name__ == "__main__":
    main()
