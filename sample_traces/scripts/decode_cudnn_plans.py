"""Greedy decoding whose attention reads a K/V cache one position longer at every token, through SDPA.

Run: tracekit profile --warmup 1 --active 6 sample_traces/scripts/decode_cudnn_plans.py [--fixed]
A 12-layer, 1024-wide decoder (16 heads of 64, bf16, random weights, inference mode), 16 sequences,
a 192-token prompt prefilled into a preallocated cache, then 4 tokens per step. Each layer calls
`F.scaled_dot_product_attention(q, k_cache[:, :, :n], v_cache[:, :, :n])`: the K/V length n grows by
one per token. On an H100/H200 with torch 2.11 SDPA picks cuDNN for these shapes, and cuDNN builds
(and caches) an execution plan per shape: one new plan per token. `--fixed` runs the same decoding
under `sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])`, which need no plan.
Without CUDA it runs tiny sizes on the CPU (no cuDNN there: both variants are the same computation).
"""

import argparse
import contextlib
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
DTYPE = torch.bfloat16 if CUDA else torch.float32
LAYERS, DIM, HEADS = (12, 1024, 16) if CUDA else (2, 64, 4)
BATCH, PROMPT, TOKENS = (16, 192, 4) if CUDA else (2, 8, 2)
VOCAB = 32768 if CUDA else 256
HEAD_DIM = DIM // HEADS


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, at: int, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, HEAD_DIM).unbind(2)
        k_cache[:, :, at:at + t] = k.transpose(1, 2)
        v_cache[:, :, at:at + t] = v.transpose(1, 2)
        n = at + t
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache[:, :, :n], v_cache[:, :, :n], is_causal=t > 1)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Decoder(nn.Module):
    def __init__(self, max_len: int) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(max_len, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, ids: torch.Tensor, at: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = self.embed(ids) + self.pos(torch.arange(at, at + ids.shape[1], device=ids.device))
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer(x, at, kc, vc)
        return self.norm(x[:, -1]) @ self.embed.weight.T


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="decoding steps after the warm-up one (default 10)")
    p.add_argument("--fixed", action="store_true", help="flash / memory-efficient SDPA backends only")
    args = p.parse_args()
    max_len = PROMPT + (args.steps + 1) * TOKENS
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder(max_len)
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
        model = model.to(DTYPE).eval()
        caches = [(torch.zeros(BATCH, HEADS, max_len, HEAD_DIM, dtype=DTYPE),
                   torch.zeros(BATCH, HEADS, max_len, HEAD_DIM, dtype=DTYPE)) for _ in range(LAYERS)]
        ids = torch.randint(0, VOCAB, (BATCH, PROMPT))
    backends = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]) if args.fixed and CUDA \
        else contextlib.nullcontext()
    times = []
    with torch.inference_mode(), backends:
        logits = model(ids, 0, caches)
        at = PROMPT
        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        for i in range(args.steps + 1):
            if CUDA:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(TOKENS):
                token = logits.argmax(-1)
                checksum += token.sum()
                logits = model(token[:, None], at, caches)
                at += 1
            if CUDA:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            mark_step()  # step 0 (the first, with its kernel and plan set-up) is the warm-up
    steady = times[1:]
    print(f"decode_cudnn_plans fixed={args.fixed} checksum {int(checksum.item())}: mean step time over steps "
          f"1..{args.steps}: {1e3 * sum(steady) / len(steady):.3f} ms")


if __name__ == "__main__":
    main()
