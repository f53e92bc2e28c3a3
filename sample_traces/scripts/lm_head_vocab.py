"""One LM-head training step: logits = hidden @ W.T for a GPT-2 vocabulary, cross-entropy, backward
and a fused AdamW step, under bf16 autocast. The three GEMMs of the head (logits, grad of the hidden
states, grad of the weight) all have the vocabulary as one dimension.

Run: tracekit profile --warmup 1 --active 6 sample_traces/scripts/lm_head_vocab.py
     tracekit profile --warmup 1 --active 6 sample_traces/scripts/lm_head_vocab.py --vocab 50304
The pair of the align_dims rule: 8192 tokens (batch 8 x seq 1024), width 768; vocab 50257 (GPT-2's,
odd: no bf16 leading dimension is a multiple of 8 elements / 16 bytes) vs 50304 (padded up to a
multiple of 64, nanoGPT's fix; the targets stay below 50257). Without CUDA it runs tiny sizes on
the CPU (a quick check of the script).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""

REAL_VOCAB = 50257  # GPT-2's vocabulary: the targets are drawn below it in both variants


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=REAL_VOCAB, help="rows of the head (50304: padded)")
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    tokens, d = (8192, 768) if cuda else (64, 32)
    vocab = args.vocab if cuda else min(args.vocab, 1000)
    torch.manual_seed(0)
    head = nn.Linear(d, vocab, bias=False).to(device)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, fused=cuda)
    hidden = torch.randn(tokens, d, device=device, requires_grad=True)
    targets = torch.randint(0, min(REAL_VOCAB, vocab), (tokens,), device=device)

    def train_step() -> torch.Tensor:
        hidden.grad = None
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            logits = head(hidden)
        loss = F.cross_entropy(logits.float(), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    # One warm-up step (cuBLAS heuristics, the optimizer's state): under tracekit its optimizer.step()
    # ends ProfilerStep#0, and the first mark_step() below takes over from that mark (no empty step).
    loss = train_step()
    if cuda:
        torch.cuda.synchronize()
    mark_step()  # record with --warmup 1 to leave the set-up and warm-up step out
    times = []
    for _ in range(args.steps):
        times.append(time.perf_counter())
        loss = train_step()
        mark_step()
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    print(f"vocab {vocab}: loss {loss.item():.4f}; mean step time over steps 2..{args.steps - 1}: "
          f"{per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
