"""Zero-shot ticket router that computes next-token logits at every prompt position to read the last one.

A small decoder-only LM (12 pre-norm blocks of width 1,024, 16 heads, causal SDPA, a 128,256-token
vocabulary with the output head tied to the embedding; bf16 autocast, no grad) routes support
tickets: each prompt (the ticket, then "Route to:") is scored by the log-probabilities of 12 team
names' first tokens at the last position. The scoring code does what most code calling an LM
does, `logits = lm_head(hidden).float()` and then `logits[:, -1]`: the head GEMM runs over all
8 x 1,024 positions (M = 8,192, N = 128,256, K = 1,024) and writes 8,192 rows of logits, twice
(bf16, then the float copy), when only 8 rows are read.

  baseline          `lm_head(hidden).float()[:, -1]`
  --variant last_position   `lm_head(hidden[:, -1:]).float()`: the same head on the 8 rows that are used (M = 8)

Same weights and prompts; the last-position logits can differ in bf16 rounding (cuBLAS picks
another kernel for M = 8).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, bf16, options
from torch import nn

ROUTES = 12
if CUDA:
    PROMPTS, LENGTH, VOCAB, WIDTH, HEADS, LAYERS = 8, 1024, 128256, 1024, 16, 12
else:
    PROMPTS, LENGTH, VOCAB, WIDTH, HEADS, LAYERS = 2, 32, 512, 32, 4, 2


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(AttnBlock(WIDTH, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for blk in self.blocks:
            h = blk(h, causal)
        return self.norm(h)

    def lm_head(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.embed.weight)  # tied output head


def main() -> None:
    args = options(__doc__, ("last_position",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = TinyLM().eval()
        model.embed.weight.data.mul_(0.05)
    g = torch.Generator(device=DEVICE).manual_seed(1)
    route_tokens = torch.randint(VOCAB // 64, VOCAB, (ROUTES,), generator=g, device=DEVICE)
    suffix = torch.randint(VOCAB // 64, VOCAB, (4,), generator=g, device=DEVICE)  # "Route to:"

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    hist = torch.zeros(ROUTES, device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            ids = torch.randint(VOCAB // 64, VOCAB, (PROMPTS, LENGTH), generator=g, device=DEVICE)
            ids[:, -suffix.numel():] = suffix
            with bf16():
                h = model.hidden(ids)
                if args.variant == "last_position":
                    last = model.lm_head(h[:, -1:]).float()[:, -1]
                else:
                    last = model.lm_head(h).float()[:, -1]
            logp = torch.log_softmax(last, -1)[:, route_tokens]  # (PROMPTS, ROUTES)
            total += logp.double().logsumexp(-1).sum()
            hist += F.one_hot(logp.argmax(-1), ROUTES).double().sum(0)
            timer.end()
    timer.report(f"ticket_router_full_logits variant={args.variant or 'baseline'} route log-mass "
                 f"{total.item() / args.steps:.4f} routes {hist.long().tolist()}")


if __name__ == "__main__":
    main()
