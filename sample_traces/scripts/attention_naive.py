"""Naive causal attention in bf16 (B=8, H=16, S=2048, D=64): matmul, mask, softmax, matmul.

Run: tracekit profile sample_traces/scripts/attention_naive.py -o sample_traces/attention_naive.trace.json.gz
The 8x16x2048x2048 score matrix (1 GiB in bf16) goes to memory and back several times;
attention_sdpa.py computes the same thing with F.scaled_dot_product_attention (a fused flash kernel).
"""

import math

import torch

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def build(device: str) -> tuple[torch.Tensor, ...]:
    b, h, s, d = (8, 16, 2048, 64) if device == "cuda" else (1, 2, 128, 64)
    dtype = torch.bfloat16
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dtype) for _ in range(3))
    causal = torch.ones(s, s, device=device, dtype=torch.bool).tril()
    return q, k, v, causal


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v, causal = build(device)
    for _ in range(2):  # warm-up
        attention(q, k, v, causal)
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(5):
        attention(q, k, v, causal)
        mark_step()
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
