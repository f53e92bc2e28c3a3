"""attention_naive.py's causal attention as one F.scaled_dot_product_attention call (flash / cuDNN kernel).

Run: tracekit profile sample_traces/scripts/attention_sdpa.py -o sample_traces/attention_sdpa.trace.json.gz
The "after" of the use-SDPA rule: same q, k, v (B=8, H=16, S=2048, D=64, bf16), is_causal=True.
"""

import torch
import torch.nn.functional as F
from attention_naive import attention as naive
from attention_naive import build

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v, causal = build(device)
    out = attention(q, k, v, causal)  # warm-up, and a check against the naive version
    ref = naive(q.float(), k.float(), v.float(), causal)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert err < 2e-2, f"SDPA relative error {err}"
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
